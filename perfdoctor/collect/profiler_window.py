"""The torch.profiler window: exactly the profiled steps, traced in the trace-handler layout.

The profiler is opened at the start of the step before the window (the plan's untimed
`profiler_warmup` step), which it spends in WARMUP (kineto's start-up cost stays out of the
recorded steps and out of the timed ones: it slows that step 7-17%), then records the profiled
steps and saves when the step after the window starts. `prof.step()` is only ever called at
the start of an iteration (mechanics §2.2), and the profiler's step counter is set to our
step index, so `ProfilerStep#N` in the trace is step N of steps.jsonl.

If the script runs its own torch.profiler, perfdoctor backs off: a second session would be
ended by the user's `stop()` (mechanics §1.1).
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
from pathlib import Path
from typing import Any

from perfdoctor import rundir

log = logging.getLogger(__name__)


class ProfilerWindow:
    def __init__(self, run_dir: Path, *, first_step: int, steps: int) -> None:
        self._run_dir = run_dir
        self.first_step = first_step
        self.steps = steps
        self.open_at = max(first_step - 1, 0)
        self._prof: Any = None
        self._state = "idle"  # idle / open / closed / backed_off
        self._traces_before: set[str] = set()
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

    def on_step_start(self, index: int) -> None:
        if self._state == "idle" and index == self.open_at:
            self._open(index)
        elif self._state == "open":
            self._call("step")

    def finish(self) -> None:
        """The step after the window started: save the trace and close."""
        if self._state != "open":
            return
        self._call("step")
        self._close()

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
        from torch.profiler import ProfilerActivity, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU]
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            activities.append(ProfilerActivity.CUDA)
        self._activity_names = [a.name for a in activities]
        worker = f"{socket.gethostname()}_{os.getpid()}"
        handler_params = inspect.signature(tensorboard_trace_handler).parameters
        handler_kwargs: dict[str, Any] = {"worker_name": worker}
        if "use_gzip" in handler_params:
            handler_kwargs["use_gzip"] = True
        wanted: dict[str, Any] = {
            "activities": activities,
            "schedule": action,
            "on_trace_ready": tensorboard_trace_handler(str(self._run_dir), **handler_kwargs),
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

    def _close(self) -> None:
        if self._prof is not None:
            self._call("stop")
        self._prof = None
        self._state = "closed"
        written = [
            p.name for p in rundir.find_traces(self._run_dir) if p.name not in self._traces_before
        ]
        self.info["trace_files"] = written


def _sync_events_config(torch: Any) -> Any:
    """`enable_cuda_sync_events` shows stream/event waits in the trace (torch 2.1+)."""
    config_cls = getattr(torch.profiler, "_ExperimentalConfig", None)
    if config_cls is None:
        return None
    try:
        return config_cls(enable_cuda_sync_events=True)
    except TypeError:
        return None
