"""The GPU timeline's idle shares as causes of an under-used GPU, so that the headline and
the GPU timeline section (render/gpu_view.py) name the same biggest share.

Without ProfilerStep spans the step-based data wait (data_wait_frac) is unknown, yet the
timeline still measures the GPU idling while the host sat in the DataLoader; and a
profiled window can show a bigger input share than the timed steps' average. The larger of
the two is the input cause. The allocator's share (host in cudaMalloc/cudaFree while the
GPU idles) and the launch gaps between queued kernels are causes of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.model import Facts
from perfdoctor.rules.allocator import ALLOCATOR_CHURN
from perfdoctor.rules.base import num
from perfdoctor.rules.launch import LAUNCH_BOUND


@dataclass(frozen=True)
class TimelineCause:
    name: str
    share: float
    rule_id: str
    optimizations: tuple[str, ...]
    advice: str


def input_share(facts: Facts) -> float | None:
    """The input cause's share: the step-based data wait or the GPU timeline's idle time in
    the DataLoader, whichever is larger (either alone when only one is measured)."""
    shares = [v for v in (num(facts, "data_wait_frac"), num(facts, "gpu_idle_host_data_frac")) if v]
    if shares:
        return max(shares)
    return num(facts, "data_wait_frac")


def extra_causes(facts: Facts) -> list[TimelineCause]:
    causes = []
    alloc = num(facts, "gpu_idle_alloc_frac")
    if alloc is not None:
        causes.append(
            TimelineCause(
                "device memory allocation (cudaMalloc/cudaFree; hipMalloc/hipFree)",
                alloc,
                ALLOCATOR_CHURN,
                (),
                "a steady step makes no malloc/free calls: keep the caching allocator on and "
                "do not empty its cache in the loop (the allocator finding says which)",
            )
        )
    gaps = num(facts, "gpu_idle_launch_gap_frac")
    if gaps is not None:
        causes.append(
            TimelineCause(
                "launch gaps between queued kernels",
                gaps,
                LAUNCH_BOUND,
                ("compile-cudagraphs", "compile"),
                "fewer, larger kernels (torch.compile fuses them; CUDA graphs remove the "
                "per-kernel dispatch)",
            )
        )
    return causes
