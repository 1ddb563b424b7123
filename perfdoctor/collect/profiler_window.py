"""The torch.profiler window: exactly the profiled steps, traced in the trace-handler layout.

The profiler is opened at the start of the step before the window (the plan's untimed
`profiler_warmup` step), which it spends in WARMUP (kineto's start-up cost stays out of the
recorded steps and out of the timed ones: it slows that step 7-17%), then records the profiled
steps and saves when the step after the window starts. `prof.step()` is only ever called at
the start of an iteration (mechanics §2.2), and the profiler's step counter is set to our
step index, so `ProfilerStep#N` in the trace is step N of steps.jsonl.

If the script runs its own torch.profiler, perfdoctor backs off: a second session would be
ended by the user's `stop()` (mechanics §1.1).

Bounded cost. Under the profiler a step costs 1.4-1.9x on CPU, but far more where the step
runs much Python: `with_stack` traces every Python call, and processing and writing those
events costs many times the recording (a pure-Python tokenizer in the window: 0.1 s steps,
51 MB of trace JSON per step, seconds to stop and write each). At the start of each profiled
step after the first, the window closes and saves what it has when
  * the recorded steps took more than SLOW_STEP_FACTOR x the median timed step on average,
    and SLOW_STEP_MIN_EXTRA_S more (the sign of a Python-heavy step, whose trace costs far
    more to write than to record), or
  * the recording has spent its budget: WINDOW_BUDGET_FACTOR x the planned profiled steps x
    the median timed step, at least MIN_WINDOW_BUDGET_S.
The remaining profiled steps run without the profiler, `info["dropped_steps"]` and
`["dropped_why"]` say what was dropped (the run warns about it), and `record_s`/`export_s`
keep what recording and writing the trace took. The trace is gzipped at TRACE_GZIP_LEVEL,
not at gzip's default 9 (torch's handler): 4x faster for a 9% larger file.
"""

from __future__ import annotations

import gzip
import inspect
import json
import logging
import os
import re
import socket
import statistics
import time
from pathlib import Path
from typing import Any

from perfdoctor import rundir

log = logging.getLogger(__name__)

# The recording may take this many times what the profiled steps take without a profiler
# (the usual 1.4-1.9x CPU overhead fits with room to spare; Python-heavy steps do not).
WINDOW_BUDGET_FACTOR = 3.0
# ...but never less than this: a window of very short steps costs little whatever its ratio.
MIN_WINDOW_BUDGET_S = 2.0
# Recorded steps slower than this many timed steps, and by at least SLOW_STEP_MIN_EXTRA_S
# each: Python-heavy, and one recorded step is enough. The extra time per step stands for the
# events to process and write (the tokenizer above: ~30 ms extra, ~50 MB of JSON per step);
# a tiny step's fixed profiler cost can exceed the ratio and still write little.
SLOW_STEP_FACTOR = 2.5
SLOW_STEP_MIN_EXTRA_S = 0.010
TRACE_GZIP_LEVEL = 6
TRACE_CHUNK_BYTES = 1 << 22  # lines read and compressed at a time while writing a trace


class ProfilerWindow:
    def __init__(self, run_dir: Path, *, first_step: int, steps: int) -> None:
        self._run_dir = run_dir
        self.first_step = first_step
        self.steps = steps
        self.open_at = max(first_step - 1, 0)
        self._prof: Any = None
        self._state = "idle"  # idle / open / closed / backed_off
        self._traces_before: set[str] = set()
        self._timed_s: list[float] = []
        self._record_start: float | None = None
        self.info: dict[str, Any] = {
            "user_profiler": False,
            "emit_nvtx": False,
            "window": {"first_step": first_step, "steps": steps},
            "started": False,
            "trace_files": [],
        }

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    def owns(self, prof: Any) -> bool:
        return prof is not None and prof is self._prof

    # ------------------------------------------------------------------ plan events

    def timed_step(self, wall_s: float) -> None:
        """A timed step's wall time: the yardstick of the window's budget."""
        self._timed_s.append(wall_s)

    def budget_s(self) -> float | None:
        if not self._timed_s:
            return None
        expected = self.steps * statistics.median(self._timed_s)
        return max(MIN_WINDOW_BUDGET_S, WINDOW_BUDGET_FACTOR * expected)

    def on_step_start(self, index: int) -> None:
        if self._state == "idle" and index == self.open_at:
            self._open(index)
        elif self._state == "open":
            if index == self.first_step:
                self._record_start = time.perf_counter()
            elif self._over_budget(index):
                self._close()
                return
            self._call("step")

    def _over_budget(self, index: int) -> bool:
        """Past the budget at the start of profiled step `index` (not the first)."""
        last = self.first_step + self.steps - 1
        budget = self.budget_s()
        if self._record_start is None or budget is None or not self.first_step < index <= last:
            return False
        spent = time.perf_counter() - self._record_start
        recorded = index - self.first_step
        per_step = spent / recorded
        timed = statistics.median(self._timed_s)
        if per_step > SLOW_STEP_FACTOR * timed and per_step - timed >= SLOW_STEP_MIN_EXTRA_S:
            why = (
                f"{per_step * 1000:.0f} ms per step under the profiler, "
                f"{per_step / timed:.1f}x a timed step (> {SLOW_STEP_FACTOR:g}x: Python-heavy "
                "steps cost far more to write than to record)"
            )
        elif spent >= budget:
            why = (
                f"{spent:.1f} s, past its budget of {budget:.1f} s "
                f"({WINDOW_BUDGET_FACTOR:g}x the median timed step x {self.steps})"
            )
        else:
            return False
        self.info["dropped_steps"] = last - index + 1
        self.info["dropped_why"] = (
            f"the profiler recorded {recorded} of {self.steps} steps: {why}; "
            f"the other {last - index + 1} ran without it"
        )
        return True

    def finish(self) -> None:
        """The step after the window started: save the trace and close."""
        if self._state != "open":
            return
        ended = time.perf_counter()
        self._call("step")  # RECORD_AND_SAVE -> the trace is written here
        self._close(ended)

    def close(self) -> None:
        """The run ended inside the window: save what was recorded."""
        if self._state == "open":
            self._close()

    def back_off(self, why: str) -> None:
        self.info["user_profiler"] = True
        if self._state == "open":
            self.info["interrupted"] = why
            self._close()
        if self._state == "idle":
            self.info["backed_off"] = why
            self._state = "backed_off"

    # ------------------------------------------------------------------ details

    def _open(self, index: int) -> None:
        import torch
        from torch.profiler import ProfilerAction

        first, last = self.first_step, self.first_step + self.steps - 1

        def action(step: int) -> ProfilerAction:
            if step < first - 1 or step > last:
                return ProfilerAction.NONE
            if step == first - 1:
                return ProfilerAction.WARMUP
            return ProfilerAction.RECORD_AND_SAVE if step == last else ProfilerAction.RECORD

        try:
            self._traces_before = {p.name for p in rundir.find_traces(self._run_dir)}
            prof = torch.profiler.profile(**self._profile_kwargs(torch, action))
            # Align the profiler's step counter with ours: ProfilerStep#N == steps.jsonl N.
            prof.step_num = index
            prof.current_action = action(index)
            if hasattr(prof, "_prev_schedule_action"):
                prof._prev_schedule_action = prof.current_action
            self._prof = prof
            prof.start()
        except Exception as exc:
            self._prof = None
            self._state = "closed"
            self.info["error"] = f"profiler did not start: {type(exc).__name__}: {exc}"
            log.debug("profiler did not start", exc_info=True)
            return
        self._state = "open"
        self.info["started"] = True
        self.info["activities"] = self._activity_names

    def _profile_kwargs(self, torch: Any, action: Any) -> dict[str, Any]:
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            activities.append(ProfilerActivity.CUDA)
        self._activity_names = [a.name for a in activities]
        worker = f"{socket.gethostname()}_{os.getpid()}"
        wanted: dict[str, Any] = {
            "activities": activities,
            "schedule": action,
            "on_trace_ready": _trace_writer(self._run_dir, worker),
            "record_shapes": True,
            "with_stack": True,
            "profile_memory": True,
        }
        if cuda:
            config = _sync_events_config(torch)
            if config is not None:
                wanted["experimental_config"] = config
        params = inspect.signature(torch.profiler.profile.__init__).parameters
        return {k: v for k, v in wanted.items() if k in params}

    def _call(self, method: str) -> None:
        try:
            getattr(self._prof, method)()
        except Exception as exc:
            self.info["error"] = f"profiler.{method}() failed: {type(exc).__name__}: {exc}"
            log.debug("profiler.%s failed", method, exc_info=True)
            self._state = "closed"
            self._prof = None

    def _close(self, ended: float | None = None) -> None:
        """Stop (saving what was recorded, if not saved yet); `ended`: when recording ended."""
        ended = time.perf_counter() if ended is None else ended
        if self._record_start is not None:
            self.info["record_s"] = round(ended - self._record_start, 3)
        if self._prof is not None:
            self._call("stop")  # on_trace_ready runs here when the window is cut short
        if self._record_start is not None:
            self.info["export_s"] = round(time.perf_counter() - ended, 3)
        self._prof = None
        self._state = "closed"
        written = [
            p.name for p in rundir.find_traces(self._run_dir) if p.name not in self._traces_before
        ]
        self.info["trace_files"] = written


def _trace_writer(run_dir: Path, worker: str) -> Any:
    """torch's tensorboard_trace_handler layout (`<worker>.<ns>.pt.trace.json.gz`, what the
    TensorBoard plugin, Perfetto and HTA read), gzipped at TRACE_GZIP_LEVEL."""

    def write(prof: Any) -> None:
        name = f"{worker}.{time.time_ns()}.pt.trace.json"
        plain = run_dir / f".{name}.tmp"  # no trace suffix: never read half-written
        try:
            prof.export_chrome_trace(str(plain))
            final = run_dir / f"{name}.gz"
            partial = run_dir / f".{name}.gz.tmp"
            with (
                open(plain, "rb") as source,
                gzip.open(partial, "wb", compresslevel=TRACE_GZIP_LEVEL) as target,
            ):
                # In chunks of lines, one write each: a write per line was most of the
                # export (the README demo's 18 MB trace: 6.3-14 s per line against 1.5-2.7 s
                # chunked, same bytes, at a load of 7-9).
                while lines := source.readlines(TRACE_CHUNK_BYTES):
                    target.write(b"".join(map(repair_line, lines)))
            os.replace(partial, final)
        finally:
            plain.unlink(missing_ok=True)
            (run_dir / f".{name}.gz.tmp").unlink(missing_ok=True)

    return write


# kineto writes one `"key": "value"` per line and does not escape the value: a script named
# tr"ain.py made `"name": "tr"ain.py(4): <module>",`, invalid JSON, and a completed run lost
# its report. A line of one pair has four quotes; one with more that is no valid pair gets
# the inner quotes escaped (and is kept as it was if that does not make it valid).
_PAIR_LINE = re.compile(rb'^(\s*"[^"\\]*": ")(.*)("\s*,?\s*)$', re.DOTALL)
_BARE_QUOTE = re.compile(rb'(?<!\\)"')


def repair_line(line: bytes) -> bytes:
    """`line` of a kineto trace, with the bare quotes inside its one string value escaped."""
    if line.count(b'"') <= 4:
        return line
    match = _PAIR_LINE.match(line)
    if match is None or not _BARE_QUOTE.search(match[2]):
        return line
    if _valid_pair(line):
        return line  # several pairs on one line, all well formed
    fixed = match[1] + _BARE_QUOTE.sub(rb'\\"', match[2]) + match[3]
    return fixed if _valid_pair(fixed) else line


def _valid_pair(line: bytes) -> bool:
    try:
        json.loads(b"{" + line.strip().rstrip(b",") + b"}")
    except ValueError:
        return False
    return True


def _sync_events_config(torch: Any) -> Any:
    """`enable_cuda_sync_events` shows stream/event waits in the trace (torch 2.1+)."""
    config_cls = getattr(torch.profiler, "_ExperimentalConfig", None)
    if config_cls is None:
        return None
    try:
        return config_cls(enable_cuda_sync_events=True)
    except TypeError:
        return None
