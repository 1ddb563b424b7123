"""The exact lines that make the host wait for the GPU, seen at the call, during the profiled steps.

The profiler trace shows *that* a step synchronised (`aten::_local_scalar_dense`,
`cudaStreamSynchronize`) and in which Python function, but not on which line: kineto names a
frame by the line its function starts on, or, for the training loop that was already running
when the window opened, by whatever line it was on at that moment (analyze/attribution.py).
A user reading "host sync in train()" still has to find the `.item()` among fifty lines.

So while the profiled steps run (a handful of steps, so the cost does not matter), the calls
that copy a CUDA value to the host are wrapped, and each call on a CUDA tensor counts its
innermost user frame with `f_lineno`: the line being executed. Out of the window nothing is
wrapped. Calls made while torch.compile traces are passed straight through (a wrapper must
never end up inside a graph).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from perfdoctor.analyze.frames import UserCode

log = logging.getLogger(__name__)

# Tensor methods that return host values (or a host copy) of a device tensor: each one waits
# for every kernel queued before it. (`.to("cpu", non_blocking=True)` does not, and is not
# wrapped.)
TENSOR_METHODS = ("item", "tolist", "cpu", "__bool__", "__float__", "__int__", "nonzero")
CALL_NAMES = {
    "item": ".item()",
    "tolist": ".tolist()",
    "cpu": ".cpu()",
    "__bool__": "bool(tensor) (an `if` on a tensor)",
    "__float__": "float(tensor)",
    "__int__": "int(tensor)",
    "nonzero": ".nonzero()",
    "synchronize": "torch.cuda.synchronize()",
}
MAX_SITES = 10
# perfdoctor's own files: syncs made by its hooks (the step log reading losses back) are its
# own, even though a user frame sits further up the stack.
# (abspath, not resolve: code objects carry the path the module was imported by.)
OWN_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class SyncCallWatcher:
    """Wraps the syncing calls while `active`; counts user call sites per (file, line, call)."""

    def __init__(
        self,
        torch: Any,
        user_code: UserCode,
        *,
        on_device: Callable[[Any], bool] | None = None,
        is_compiling: Callable[[], bool] | None = None,
    ) -> None:
        self._torch = torch
        self._user = user_code
        self._on_device = on_device or (lambda t: bool(getattr(t, "is_cuda", False)))
        self._is_compiling = is_compiling or _compiling_check(torch)
        # (owner, name, original, whether the owner defined it itself rather than inherit it)
        self._saved: list[tuple[Any, str, Any, bool]] = []
        self.counts: Counter[tuple[str, int, str, str]] = Counter()
        self.steps_watched = 0
        self.failed: str | None = None

    @property
    def active(self) -> bool:
        return bool(self._saved)

    def install(self) -> None:
        if self.active or self.failed is not None:
            return
        try:
            for name in TENSOR_METHODS:
                original = getattr(self._torch.Tensor, name)
                self._replace(self._torch.Tensor, name, self._tensor_wrapper(name, original))
            sync = self._torch.cuda.synchronize
            self._replace(self._torch.cuda, "synchronize", self._call_wrapper(sync))
        except Exception as exc:  # never break the user's run over a diagnostic
            self.uninstall()
            self.failed = f"{type(exc).__name__}: {exc}"
            log.debug("sync watcher not installed", exc_info=True)

    def step_started(self) -> None:
        if self.active:
            self.steps_watched += 1

    def uninstall(self) -> None:
        while self._saved:
            owner, name, original, own = self._saved.pop()
            if own:
                setattr(owner, name, original)
            else:  # inherited (torch.Tensor from TensorBase): leave no copy behind
                delattr(owner, name)

    def summary(self) -> dict[str, Any]:
        steps = max(self.steps_watched, 1)
        sites = []
        for (file, line, function, call), count in self.counts.most_common(MAX_SITES):
            location = self._user.location(file, line, function)
            sites.append(
                {
                    **location,
                    "call": CALL_NAMES.get(call, call),
                    "calls": count,
                    "count": math.ceil(count / steps),  # per step, as SourceLocation.count
                }
            )
        return {
            "steps_watched": self.steps_watched,
            "calls": sum(self.counts.values()),
            "sites": sites,
            "failed": self.failed,
        }

    # ------------------------------------------------------------------ wrappers

    def _replace(self, owner: Any, name: str, wrapper: Any) -> None:
        own = name in getattr(owner, "__dict__", {})
        self._saved.append((owner, name, getattr(owner, name), own))
        setattr(owner, name, wrapper)

    def _count(self, call: str) -> None:
        # Two frames up: past the wrapper, into whoever called the method.
        frame = sys._getframe(2)
        caller: Any = frame
        while caller is not None:
            filename = caller.f_code.co_filename
            if filename.startswith(OWN_CODE):
                return  # perfdoctor's own read of the losses at a flush: not the user's sync
            if self._user.is_user_file(filename):
                break
            caller = caller.f_back
        key = self._user.caller_key(frame)
        if key is not None:
            self.counts[(*key, call)] += 1

    def _tensor_wrapper(self, name: str, original: Any) -> Any:
        watcher = self

        @functools.wraps(original)
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not watcher._is_compiling() and watcher._on_device(tensor):
                watcher._count(name)
            return original(tensor, *args, **kwargs)

        return wrapper

    def _call_wrapper(self, original: Any) -> Any:
        watcher = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not watcher._is_compiling():
                watcher._count("synchronize")
            return original(*args, **kwargs)

        return wrapper


def _compiling_check(torch: Any) -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        dynamo = getattr(torch, "_dynamo", None)
        check = getattr(dynamo, "is_compiling", None)
    return check if callable(check) else (lambda: False)
