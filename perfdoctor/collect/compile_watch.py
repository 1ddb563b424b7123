"""What torch.compile does during the real run: graph breaks, recompiles and their failed
guards, compile times, cudagraph skips. Read from the artifacts dynamo emits anyway, so
nothing is traced twice (torch._dynamo.explain would re-trace the user's model).

Sources, each guarded (absent in some torch versions, then that part is just missing):
- the structured trace (`torch._logging._internal.trace_log`, what TORCH_TRACE and tlparse
  read; 2.2+): `compilation_metrics` per compiled frame, the `dynamo_graph_break_reason` and
  `recompile_reasons` artifacts (2.4+). trace_structured does its work only when the logger
  has a handler, so adding ours turns it on; it costs compile time only, never step time.
- warnings on dynamo's and inductor's own loggers: the recompile limit, cudagraph skips
  ("skipping cudagraphs due to ...") and re-recordings.
- `torch._dynamo.utils.counters` at the end.
"""

from __future__ import annotations

import json
import linecache
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfdoctor import rundir

log = logging.getLogger(__name__)

MAX_EVENTS = 2000  # per list: a recompile storm logs one set per step
MAX_TEXT = 4000  # characters kept of one artifact's text
_METRICS = ("compilation_metrics", "bwd_compilation_metrics")
_ARTIFACTS = {"dynamo_graph_break_reason": "graph_breaks", "recompile_reasons": "recompiles"}
# Loggers whose warnings name a cudagraph skip, a re-recording or the recompile limit.
_WARNING_LOGGERS = (
    "torch._dynamo.convert_frame",
    "torch._inductor.cudagraph_utils",
    "torch._inductor.cudagraph_trees",
)
_BREAK_AT = re.compile(r"Graph break in user code at (.+):(\d+)\s*$", re.M)
_RECOMPILE_LIMIT = re.compile(r"hit config\.\w*(recompile|cache_size)\w*limit")


def classify_warning(message: str) -> str | None:
    """The kind of a compile warning worth keeping, None for the rest."""
    low = message.lower()
    if "skipping cudagraph" in low:
        return "cudagraph_rerecord" if "re-record" in low else "cudagraph_skip"
    if _RECOMPILE_LIMIT.search(message):
        return "recompile_limit"
    return None


class _TraceHandler(logging.Handler):
    def __init__(self, watch: CompileWatch) -> None:
        super().__init__(level=logging.DEBUG)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.watch.on_trace(getattr(record, "metadata", None), getattr(record, "payload", None))
        except Exception:  # never let our bookkeeping break the user's compile
            log.debug("compile event not kept", exc_info=True)


class _WarningHandler(logging.Handler):
    def __init__(self, watch: CompileWatch) -> None:
        super().__init__(level=logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.watch.on_warning(record.getMessage())
        except Exception:
            log.debug("compile warning not kept", exc_info=True)


class CompileWatch:
    """Installed before the script runs; `write` saves compile.json if anything compiled."""

    def __init__(self, step_index: Callable[[], int]) -> None:
        self.step_index = step_index
        self.frames: dict[str, dict[str, Any]] = {}
        self.lists: dict[str, list[dict[str, Any]]] = {
            "graph_breaks": [],
            "recompiles": [],
            "log_lines": [],
        }
        self.dropped = 0
        self.handlers: list[tuple[logging.Logger, logging.Handler]] = []
        self.unwrap: Callable[[], None] = lambda: None  # puts torch.compile back (tests)

    def install(self) -> bool:
        self._wrap_compile()
        try:
            from torch._logging._internal import trace_log
        except ImportError:  # torch before the structured trace
            return False
        trace_log.setLevel(logging.DEBUG)
        trace_log.propagate = False  # as TORCH_TRACE leaves it: our events stay off stderr
        self._add(trace_log, _TraceHandler(self))
        for name in _WARNING_LOGGERS:
            self._add(logging.getLogger(name), _WarningHandler(self))
        return True

    def _wrap_compile(self) -> None:
        """Mark perfdoctor's global module hooks as frames dynamo never converts, the moment
        the script first calls torch.compile (nn.Module.compile calls it too). Under
        torch.compile(module) the wrapper's eager __call__ runs global hooks with dynamo's
        frame callback set: dynamo compiled them as frames of their own (0 ops) and
        recompiled them on every grad-mode switch (nanoGPT's evaluation under no_grad).
        Inside a traced forward they are still inlined (they return while compiling)."""
        import torch

        original = torch.compile
        if getattr(original, "_perfdoctor_wrapped", False):
            return

        def compile_skipping_our_hooks(*args: Any, **kwargs: Any) -> Any:
            skip_our_frames()
            return original(*args, **kwargs)

        compile_skipping_our_hooks._perfdoctor_wrapped = True  # type: ignore[attr-defined]
        compile_skipping_our_hooks.__wrapped__ = original  # type: ignore[attr-defined]
        compile_skipping_our_hooks.__doc__ = original.__doc__
        torch.compile = compile_skipping_our_hooks  # type: ignore[assignment]
        self.unwrap = lambda: setattr(torch, "compile", original)

    def _add(self, logger: logging.Logger, handler: logging.Handler) -> None:
        logger.addHandler(handler)
        self.handlers.append((logger, handler))

    def uninstall(self) -> None:
        """Stop recording (the compile wrapper stays: the script may compile again)."""
        for logger, handler in self.handlers:
            logger.removeHandler(handler)
        self.handlers.clear()

    def _step(self) -> int | None:
        try:
            return int(self.step_index())
        except Exception:
            return None

    def _keep(self, key: str, row: dict[str, Any]) -> None:
        rows = self.lists[key]
        if len(rows) >= MAX_EVENTS:
            self.dropped += 1
            return
        rows.append(row)

    def on_trace(self, metadata: Any, payload: Any) -> None:
        if not isinstance(metadata, dict):
            return
        cid = _compile_id(metadata)
        for name in _METRICS:
            body = metadata.get(name)
            if isinstance(body, dict):
                self._on_metrics(name, body, cid)
                return
        art = metadata.get("artifact")
        if isinstance(art, dict) and art.get("name") in _ARTIFACTS:
            text = _newest(payload if isinstance(payload, str) else "")
            row = {"compile_id": cid, "step": self._step(), "text": text[:MAX_TEXT]}
            where = _BREAK_AT.match(text)
            if where is not None:  # the line as written, for the report's before/after
                row["code"] = linecache.getline(where.group(1), int(where.group(2))).rstrip()
            self._keep(_ARTIFACTS[str(art["name"])], row)

    def _on_metrics(self, name: str, body: dict[str, Any], cid: str | None) -> None:
        cid = str(body.get("compile_id") or cid or "?")
        if name == "bwd_compilation_metrics":
            frame = self.frames.setdefault(cid, {"compile_id": cid})
            frame["backward_compile_s"] = _num(body.get("inductor_compile_time_s"))
            return
        if cid not in self.frames and len(self.frames) >= MAX_EVENTS:
            self.dropped += 1
            return
        frame = self.frames.setdefault(cid, {"compile_id": cid})
        reasons = body.get("restart_reasons")
        frame.update(
            step=self._step(),
            co_name=body.get("co_name"),
            co_filename=body.get("co_filename"),
            co_firstlineno=body.get("co_firstlineno"),
            compile_s=_num(body.get("entire_frame_compile_time_s")),
            backend_s=_num(body.get("backend_compile_time_s")),
            graph_ops=body.get("graph_op_count"),
            fail_type=body.get("fail_type"),
            fail_reason=_text(body.get("fail_reason")),
            restart_reasons=[_text(r) for r in reasons] if isinstance(reasons, list) else None,
        )

    def on_warning(self, message: str) -> None:
        kind = classify_warning(message)
        if kind is not None:
            row = {"kind": kind, "step": self._step(), "message": message[:MAX_TEXT]}
            self._keep("log_lines", row)

    def result(self) -> dict[str, Any] | None:
        """compile.json's content; None when nothing compiled."""
        counters = _counters()
        if not self.frames and not any(self.lists.values()) and not counters:
            return None
        import torch

        return {
            "torch": str(torch.__version__),
            "frames": [{k: v for k, v in f.items() if v is not None} for f in self.frames.values()],
            **self.lists,
            "counters": counters,
            "dropped": self.dropped,
            **({"recompile_limit": limit} if (limit := recompile_limit()) is not None else {}),
        }

    def write(self, run_dir: Path) -> None:
        data = self.result()
        if data is not None:
            rundir.write_json(run_dir / rundir.COMPILE_FILE, data)


_SKIPPED: set[Any] = set()


def our_hook_codes() -> list[Any]:
    """Code objects of perfdoctor's hooks that run on every module call: the global module
    hooks, and the wrapper of the root's own hooks (its one __call__ serves the pre and the
    post hook, so dynamo recompiled it for the second: a guard on the wrapped function)."""
    from perfdoctor.collect.probes_roots import InertWhenCopied, RootFinder

    return [
        RootFinder._global_pre.__code__,
        RootFinder._global_post.__code__,
        InertWhenCopied.__call__.__code__,
    ]


def skip_our_frames() -> None:
    """Tell dynamo never to convert our hooks' frames, nor the frames they call: a recursive
    skip (set_code_exec_strategy, 2.6+); before it, skip_code (the hook frame only)."""
    try:
        from torch._dynamo import eval_frame

        skip = _recursive_skip(eval_frame) or getattr(eval_frame, "skip_code", None)
        if skip is None:
            import torch

            skip = getattr(torch._C._dynamo.eval_frame, "skip_code")  # noqa: B009 (older torch only)
        for code in our_hook_codes():
            if code not in _SKIPPED:
                skip(code)
                _SKIPPED.add(code)
    except Exception:  # an older or newer dynamo without it: hooks still return at once
        log.debug("could not mark perfdoctor's hooks as skipped frames", exc_info=True)


def _recursive_skip(eval_frame: Any) -> Callable[[Any], None] | None:
    setter = getattr(eval_frame, "set_code_exec_strategy", None)
    try:
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        return None
    if setter is None:
        return None
    strategy = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    return lambda code: setter(code, strategy)


def _newest(text: str) -> str:
    """With several cached graphs a recompile's reasons are a JSON list, one failure per
    cached graph, the newest first: kept whole it would be cut mid-list by MAX_TEXT."""
    if not text.startswith("["):
        return text
    try:
        items = json.loads(text)
    except ValueError:
        return text
    return str(items[0]) if isinstance(items, list) and items else text


def _compile_id(metadata: dict[str, Any]) -> str | None:
    frame, attempt = metadata.get("frame_id"), metadata.get("frame_compile_id")
    if frame is None:
        return None
    return f"{frame}/{attempt if attempt is not None else 0}"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:MAX_TEXT]


def recompile_limit() -> int | None:
    """dynamo's recompile limit per frame as the script left it (scripts raise it to silence
    the warning; older torch calls it cache_size_limit), None when dynamo was never imported."""
    import sys

    config = sys.modules.get("torch._dynamo.config")
    for name in ("recompile_limit", "cache_size_limit"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _counters() -> dict[str, dict[str, int]]:
    """dynamo's counters, only if the script imported dynamo (importing it costs seconds)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    for group in ("graph_break", "stats", "inductor", "recompiles", "frames"):
        values = counters.get(group)
        if group == "inductor" and values:  # hundreds of pattern-matcher counts otherwise
            values = {k: v for k, v in values.items() if "cudagraph" in str(k)}
        if values:
            out[group] = {str(k)[:500]: int(v) for k, v in values.items()}
    return out
