"""The GPU timeline's idle shares as causes of an under-used GPU, so that the headline and
the GPU timeline section (render/gpu_view.py) name the same biggest share.

Without ProfilerStep spans the step-based data wait (data_wait_frac) is unknown, yet the
timeline still measures the GPU idling while the host sat in the DataLoader; and a
profiled window can show a bigger input share than the timed steps' average. The larger of
the two is the input cause. The allocator's share (host in cudaMalloc/cudaFree while the
GPU idles) and the launch gaps between queued kernels are causes of their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.allocator import ALLOCATOR_CHURN
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, severity_for_gain
from perfdoctor.rules.input_pipeline import INPUT_BOUND
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
                "a steady step makes no malloc/free calls (the allocator finding names the "
                "cause and its fix)",
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


GPU_IDLE_INPUT = "gpu-idle-input"


def check_gpu_idle_input(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    """The input share of the GPU timeline, where the step-based data wait is not measured
    (a trace without ProfilerStep spans): the input-bound finding the section implies."""
    if num(facts, "data_wait_frac") is not None:
        return None  # input-bound judges the step-based wait; this would say it twice
    share = num(facts, "gpu_idle_host_data_frac")
    if share is None or share <= t["warning_frac"]:
        return None
    multiprocess = flag(facts, "dataloader_multiprocess")
    advice = (
        "the DataLoader already runs worker processes and they do not keep up: add workers, "
        "raise prefetch_factor, or make the Dataset/collate code cheaper"
        if multiprocess
        else "loading runs in the training process (num_workers=0): worker processes would "
        "prepare the next batches while the GPU computes"
        if multiprocess is False
        else "use DataLoader worker processes (num_workers > 0) to prepare the next batches "
        "while the GPU computes, with pinned memory; with workers already, add more or make "
        "the Dataset/collate code cheaper"
    )
    return Finding(
        rule_id=GPU_IDLE_INPUT,
        severity=severity_for_gain(share, floor="warning"),
        title=f"Input-bound: the GPU idles {pct(share)} of its window waiting for input data",
        explanation=(
            f"On the GPU timeline, {pct(share)} of the window passes with nothing queued while "
            "the launching thread is inside the DataLoader (the trace has no ProfilerStep "
            f"spans, so the per-step data wait is not measured): {advice}."
        ),
        evidence=(
            ev("gpu_idle_host_data_frac", share, t["warning_frac"], ">"),
            *seen(facts, "gpu_busy_frac", "dataloader_multiprocess"),
        ),
        gain=GainEstimate(
            step_time_frac=share,
            method="the GPU's idle share in the DataLoader, assuming workers hide it fully",
        ),
    )


RULES = (
    Rule(
        id=GPU_IDLE_INPUT,
        title="Input-bound on the GPU timeline (traces without ProfilerStep spans)",
        area="input",
        needs=("gpu_idle_host_data_frac",),
        uses=("data_wait_frac", "dataloader_multiprocess", "gpu_busy_frac"),
        thresholds={"warning_frac": 0.05},
        source=(
            "> 5%: torch-tb-profiler profiler/data.py DataLoader share rule, the input-bound "
            "rule's threshold, applied to the GPU timeline's input share"
        ),
        description=(
            "When the step-based data wait is unknown, the GPU timeline's idle share with the "
            "host in the DataLoader: the same cause the GPU timeline section shows."
        ),
        check=check_gpu_idle_input,
        device="cuda",
        optimizations=("dataloader-workers", "pin-memory"),
        root_cause=INPUT_BOUND,
    ),
)
