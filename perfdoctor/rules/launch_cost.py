"""What kernel launches can cost the host in the GPU window: the most of the host-busy idle
time that fusion and CUDA graphs can win back. CUDA graphs remove the whole host path of each
launch (Python's op, its dispatch and own CPU work, the runtime call), so the cap is the host
time of the ops that launch GPU work (launch_ops_host_frac); when the trace has no CPU op
around its launches, launches x the cost of one call. The rest of the host's time between
launches (set-up, data preparation, Python that launches nothing) is not launch overhead.
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
# The evidence that carries the cap: the launching ops' host time share, or, when the trace
# has none, the launch count with the product in its note.
OPS_CAP_EVIDENCE = "launch_ops_host_frac"
CAP_EVIDENCE = "gpu_window_launch_count"
OPS_CAP_WHAT = "host time of the ops that launch GPU work: what CUDA graphs remove at most"


@dataclass(frozen=True)
class LaunchCap:
    """The host time of the launching ops (`from_ops`), or launches x the cost of one, as a
    share of the GPU window, and how that was found."""

    frac: float
    launches: float
    launch_us: float
    measured: bool
    window_ms: float
    from_ops: bool = False

    def note(self) -> str:
        if self.from_ops:
            host_ms = self.frac * self.window_ms
            return (
                f"{OPS_CAP_WHAT} ({self.launches:.0f} kernel/memcpy launches; syncs and calls "
                f"over 50 µs left out) = {host_ms:,.2f} ms of a {_ms(self.window_ms)} ms "
                f"window: launch overhead is at most {_share(self.frac)} of it"
            )
        how = (
            "the trace's mean kernel launch call, calls over 50 µs left out"
            if self.measured
            else "the trace times no launch call: a typical launch's cost"
        )
        host_ms = self.launches * self.launch_us / 1000.0
        return (
            f"{self.launches:.0f} kernel/memcpy launches x {self.launch_us:.1f} µs ({how}) "
            f"= {host_ms:,.2f} ms of a {_ms(self.window_ms)} ms window: launch overhead is at "
            f"most {_share(self.frac)} of it"
        )

    def short(self) -> str:
        """The product alone, for a gain's method (the evidence says how it was found)."""
        if self.from_ops:
            return (
                f"the launching ops' host time, {self.frac * self.window_ms:,.2f} ms of "
                f"{_ms(self.window_ms)} ms, {_share(self.frac)}"
            )
        host_ms = self.launches * self.launch_us / 1000.0
        return (
            f"{self.launches:.0f} launches x {self.launch_us:.1f} µs = {host_ms:,.2f} ms of "
            f"{_ms(self.window_ms)} ms, {_share(self.frac)}"
        )

    def evidence(self, host_busy: float) -> Evidence:
        if self.from_ops:
            return ev(
                OPS_CAP_EVIDENCE,
                self.frac,
                note=f"{self.note()}, of {pct(host_busy)} idle with the host busy",
            )
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
    ops = num(facts, OPS_CAP_EVIDENCE)
    if ops is not None:
        measured_ops = num(facts, "launch_call_us_mean")
        return LaunchCap(
            ops, launches, measured_ops or 0.0, measured_ops is not None, window_ms, True
        )
    measured = num(facts, "launch_call_us_mean")
    launch_us = measured if measured is not None else fallback_us
    frac = launches * launch_us / (window_ms * 1000.0)
    return LaunchCap(frac, launches, launch_us, measured is not None, window_ms)


def _ms(value: float) -> str:
    """Three significant digits, never an exponent (a 12.5 ms window read "13 ms")."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"
