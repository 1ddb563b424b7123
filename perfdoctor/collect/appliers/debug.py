"""Debug settings off: autograd anomaly detection, the script's own profiler / emit_nvtx, and
the CUDA sync debug mode.

The script's calls are turned into no-ops (its code keeps working: a profiler object still
answers step(), key_averages(), export_chrome_trace(), ...), while perfdoctor's own profiler
window, which calls the same torch API, is told apart by the calling module.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
import torch.autograd.anomaly_mode as anomaly_mode
import torch.autograd.profiler as autograd_profiler
import torch.profiler
import torch.profiler.profiler as profiler_module
from torch.autograd.profiler_util import EventList

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import (
    VERIFY_STEP,
    Applier,
    ApplyContext,
    called_from_library,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- anomaly detection


class AnomalyOff(Applier):
    """Anomaly detection off. The script's own calls are recorded as its wish (the mode it
    set, and what a `with` block restores on exit); while the fix is on the mode stays off,
    while it is switched off (in-process A/B) the script's wish is the mode."""

    id = "anomaly-off"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.suppressed = 0
        self.active = True
        # The mode the script asked for, as (enabled, check_nan): what it runs with when off.
        self.wish = (torch.is_anomaly_enabled(), _check_nan_enabled())
        applier = self

        class set_detect_anomaly:
            """Stand-in usable as a call or a context manager, like the original."""

            def __init__(self, mode: bool = True, check_nan: bool = True) -> None:
                self.prev = applier.wish
                if mode and applier.active:
                    applier.suppressed += 1
                applier._want((bool(mode), bool(check_nan)))

            def __enter__(self) -> None:
                return None

            def __exit__(self, *exc: object) -> None:
                applier._want(self.prev)

        class detect_anomaly:
            def __init__(self, check_nan: bool = True) -> None:
                self.check_nan = bool(check_nan)
                self.prev = applier.wish

            def __enter__(self) -> None:
                self.prev = applier.wish
                if applier.active:
                    applier.suppressed += 1
                applier._want((True, self.check_nan))

            def __exit__(self, *exc: object) -> None:
                applier._want(self.prev)

        for owner in (torch.autograd, anomaly_mode):
            ctx.patcher.patch(owner, "set_detect_anomaly", set_detect_anomaly)
            ctx.patcher.patch(owner, "detect_anomaly", detect_anomaly)
        was_on = self.wish[0]
        self._apply()
        self.mark_applied(
            "autograd anomaly detection forced off"
            + (" (it was on before the script)" if was_on else "")
        )
        # A script could still flip the C switch directly: switch it off again at each check.
        ctx.when_roots_known(self, lambda roots, optimizers: self._apply())

    def _want(self, wish: tuple[bool, bool]) -> None:
        self.wish = wish
        self._apply()

    def _apply(self) -> None:
        enabled, check_nan = (False, True) if self.active else self.wish
        torch.set_anomaly_enabled(enabled, check_nan)

    def switch(self, on: bool) -> None:
        self.active = on
        self._apply()

    def verify(self, final: bool) -> tuple[bool, str] | None:
        enabled = torch.is_anomaly_enabled()
        return not enabled, (
            f"anomaly mode reads {enabled}; {self.suppressed} enable call(s) of the script ignored"
        )


def _check_nan_enabled() -> bool:
    reader = getattr(torch, "is_anomaly_check_nan_enabled", None)
    return bool(reader()) if reader is not None else True


# --------------------------------------------------------------------------- profilers / nvtx


class InertProfiler:
    """Answers the profiler API the way an empty profile would, and records nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.step_num = 0
        self.profiler = None

    def __enter__(self) -> InertProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def start(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def step(self) -> None:
        self.step_num += 1

    def key_averages(self, *args: Any, **kwargs: Any) -> EventList:
        return EventList([])

    def events(self) -> EventList:
        return EventList([])

    def export_chrome_trace(self, path: str) -> None:
        # Scripts sometimes open the file they asked for: leave a valid, empty trace.
        Path(path).write_text(json.dumps({"traceEvents": []}))

    def __getattr__(self, name: str) -> Any:
        # export_stacks, add_metadata, export_memory_timeline, ...: accept and do nothing.
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class InertContext:
    """No-op stand-in for emit_nvtx / emit_itt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> InertContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class DebugModesOff(Applier):
    """Not switchable between steps. The sync debug mode alone could be (hold 0 while on,
    the script's last mode while off), but this id also covers the script's profilers, and
    those cannot be switched honestly: a profiler object lives across many steps. One the
    script builds while the fix is on is inert and cannot start recording later at the
    point its schedule would be; a real one built while off keeps running into the on-steps.
    Handing the script a real profiler and toggling its collection instead
    (toggle_collection_dynamic) leaves the profiler itself enabled: its schedule still
    steps, its on_trace_ready handler still exports traces, the Python stack tracer and the
    allocator hooks of profile_memory stay in, and the legacy autograd profiler, emit_nvtx
    and emit_itt have no toggle at all. The on-arm would not be "no profiler", and a real
    profiler of the script's would also collide with perfdoctor's own profiler window."""

    id = "debug-modes-off"

    def install(self, ctx: ApplyContext) -> None:
        self.suppressed: dict[str, int] = {"profiler": 0, "emit_nvtx": 0, "sync_debug_mode": 0}
        self._patch_profilers(ctx)
        self._patch_nvtx(ctx)
        self._patch_sync_debug(ctx)
        self.mark_applied("the script's profiler, emit_nvtx and sync debug mode made no-ops")

    def _count(self, what: str) -> None:
        self.suppressed[what] += 1

    def _patch_profilers(self, ctx: ApplyContext) -> None:
        applier = self
        for owner, original in (
            (torch.profiler, torch.profiler.profile),
            (profiler_module, profiler_module.profile),
            (autograd_profiler, autograd_profiler.profile),
        ):

            def make(original: type = original) -> type:
                class profile(original):  # type: ignore[misc,valid-type]
                    """The script gets an inert profiler; perfdoctor gets the real one."""

                    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                        if called_from_library():
                            return original(*args, **kwargs)
                        if kwargs.get("enabled", True) is not False:
                            applier._count("profiler")
                        return InertProfiler(*args, **kwargs)

                return profile

            ctx.patcher.patch(owner, "profile", make())

    def _patch_nvtx(self, ctx: ApplyContext) -> None:
        applier = self
        for name in ("emit_nvtx", "emit_itt"):
            original = getattr(autograd_profiler, name, None)
            if original is None:
                continue

            def factory(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                if called_from_library():
                    return _original(*args, **kwargs)
                applier._count("emit_nvtx")
                return InertContext()

            ctx.patcher.patch(autograd_profiler, name, factory)

    def _patch_sync_debug(self, ctx: ApplyContext) -> None:
        original = getattr(torch.cuda, "set_sync_debug_mode", None)
        if original is None:
            return
        applier = self

        def set_sync_debug_mode(mode: Any) -> None:
            if called_from_library():
                original(mode)
            elif mode not in (0, "default"):
                applier._count("sync_debug_mode")

        ctx.patcher.patch(torch.cuda, "set_sync_debug_mode", set_sync_debug_mode)
        if base.cuda_available():
            original(0)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        counts = ", ".join(f"{n} {what}" for what, n in self.suppressed.items())
        if final:
            # perfdoctor's own profiler window may be the last thing that ran: nothing to read.
            return True, f"ignored: {counts}"
        profiling = bool(torch._C._autograd._profiler_enabled())
        if base.cuda_available():
            sync_mode = torch.cuda.get_sync_debug_mode()
            ok = not profiling and sync_mode == 0
            return ok, f"profiler on={profiling}, sync debug mode={sync_mode} at step {VERIFY_STEP}"
        return not profiling, f"profiler on={profiling} at step {VERIFY_STEP}; ignored: {counts}"


APPLIERS: tuple[type[Applier], ...] = (AnomalyOff, DebugModesOff)
