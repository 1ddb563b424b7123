"""What kernel launches can cost the host in the GPU window: the most of the host-busy idle
time that fusion and CUDA graphs can win back. The rest of the host's time between launches
(set-up, data preparation, Python that launches nothing) is not launch overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.model import Evidence, Facts
from perfdoctor.rules.base import ev, num, pct

# The host's cost of one launch when the trace times none: the top of HTA's "launch time on
# the CPU side is usually 5-20 µs" (get_cuda_kernel_launch_stats docs); the top, because the
# product bounds a gain.
TYPICAL_LAUNCH_US = 20.0
LAUNCH_US_SOURCE = (
    "20 µs a launch when the trace times none: the top of HTA's 'launch time on the CPU side "
    "is usually 5-20 µs' (get_cuda_kernel_launch_stats docs), the top because it bounds a gain"
)
# The evidence that carries the cap: the launch count, with the product in its note.
CAP_EVIDENCE = "gpu_window_launch_count"


@dataclass(frozen=True)
class LaunchCap:
    """launches x the cost of one, as a share of the GPU window, and how that was found."""

    frac: float
    launches: float
    launch_us: float
    measured: bool
    window_ms: float

    def note(self) -> str:
        how = (
            "the trace's mean kernel launch call, calls over 50 µs left out"
            if self.measured
            else "the trace times no launch call: a typical launch's cost"
        )
        host_ms = self.launches * self.launch_us / 1000.0
        return (
            f"{self.launches:.0f} kernel/memcpy launches x {self.launch_us:.1f} µs ({how}) "
            f"= {host_ms:,.2f} ms of a {self.window_ms:,.0f} ms window: launch overhead is at "
            f"most {_share(self.frac)} of it"
        )

    def short(self) -> str:
        """The product alone, for a gain's method (the evidence says how it was found)."""
        host_ms = self.launches * self.launch_us / 1000.0
        return (
            f"{self.launches:.0f} launches x {self.launch_us:.1f} µs = {host_ms:,.2f} ms of "
            f"{self.window_ms:,.0f} ms, {_share(self.frac)}"
        )

    def evidence(self, host_busy: float) -> Evidence:
        return ev(
            CAP_EVIDENCE,
            self.launches,
            note=f"{self.note()}, of {pct(host_busy)} idle with the host busy",
        )


def _share(frac: float) -> str:
    """pct() with the digits a tiny share needs (0.0085%, not 0.0%)."""
    return pct(frac) if frac >= 0.001 else f"{frac * 100:.2g}%"


def launch_cap(facts: Facts, fallback_us: float) -> LaunchCap | None:
    """None when the window or its launch count is not known (then nothing is capped)."""
    launches = num(facts, "gpu_window_launch_count")
    window_ms = num(facts, "gpu_window_ms")
    if launches is None or not window_ms:
        return None
    measured = num(facts, "launch_call_us_mean")
    launch_us = measured if measured is not None else fallback_us
    frac = launches * launch_us / (window_ms * 1000.0)
    return LaunchCap(frac, launches, launch_us, measured is not None, window_ms)
