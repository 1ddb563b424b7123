"""Per-step time on the GPU's own clock, from CUDA events recorded at step starts.

Why: CUDA launches are asynchronous. A script with no host sync in its loop enqueues up to
about a thousand kernels ahead of the GPU, so the host's time between two step starts is the
*launch* time, not the time the step takes, for dozens of steps in a row. A timed window of
20 steps can then end before the queue ever fills, and an optimization that halves the GPU's
work (AMP, say) shows no gain at all on host timing.

An event recorded on the current stream at each step start completes when the GPU reaches
that point: the interval between two consecutive events is the step's time as the device
sees it, which equals the host's interval when the GPU waits for the host (host-bound) and
the GPU's work when the host runs ahead (device-bound). Recording costs a few microseconds
and never syncs; the durations are read only when the step log flushes, which already waits
for the GPU to copy the losses back.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class DeviceStepClock:
    """Events at step starts; `durations` turns them into per-step device milliseconds."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._starts: dict[int, Any] = {}
        self.failed: str | None = None

    def mark(self, index: int) -> None:
        """Step `index` starts now (on the host; the event completes when the GPU gets here)."""
        if self.failed is not None:
            return
        try:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
        except Exception as exc:  # a broken context must not break the user's run
            self._fail(exc)
            return
        self._starts[index] = event

    def durations(self, indices: list[int]) -> dict[int, float]:
        """Device time of each closed step in `indices` (ms), and forget their events.

        A step ends where the next one starts; the last closed step has no successor yet,
        so it ends at an event recorded now (its close is, on the host, just now).
        """
        if self.failed is not None or not indices:
            return {}
        out: dict[int, float] = {}
        try:
            now = None
            last = max(indices)
            if last + 1 not in self._starts:
                now = self._torch.cuda.Event(enable_timing=True)
                now.record()
            final = self._starts.get(last + 1, now)
            final.synchronize()
            for index in sorted(indices):
                start = self._starts.pop(index, None)
                end = self._starts.get(index + 1) or (final if index == last else None)
                if start is not None and end is not None:
                    out[index] = round(float(start.elapsed_time(end)), 4)
        except Exception as exc:
            self._fail(exc)
            return {}
        return out

    def _fail(self, exc: BaseException) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        self._starts.clear()
        log.debug("device step timing off", exc_info=True)
