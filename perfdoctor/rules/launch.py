"""Kernel launch and Python overhead: the GPU waits for the host, or for tiny kernels."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, num, pct, seen, severity_for_gain
from perfdoctor.rules.launch_cost import LAUNCH_US_SOURCE, TYPICAL_LAUNCH_US, launch_cap

LAUNCH_BOUND = "launch-bound"
TINY_KERNELS = "tiny-kernels"

_LAUNCH_OVERHEAD = "launch-overhead"
_BESIDE_DATA_AND_SYNCS = "while the host was neither loading data nor returning from a sync"


def check_launch_bound(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    host_wait = num(facts, "gpu_idle_host_wait_frac")
    kernel_us = num(facts, "kernel_us_p50")
    if host_wait is None or kernel_us is None or kernel_us > t["max_kernel_us_p50"]:
        return None
    busy = num(facts, "gpu_idle_host_busy_frac")
    fact, measured = "gpu_idle_host_wait_frac", host_wait
    if busy is not None:
        fact, measured = "gpu_idle_host_busy_frac", busy
        # The trace shows what the launching thread did while the GPU sat idle: only the
        # time it was neither in the DataLoader nor returning from a sync is launch overhead.
        launch_wait = busy
        note = f"of {pct(host_wait)} host wait, the part not in the DataLoader or after a sync"
    else:
        # Idle time while the host waits for data belongs to the input-bound rule.
        data_wait = num(facts, "data_wait_frac") or 0.0
        launch_wait = max(0.0, host_wait - data_wait)
        note = f"{pct(launch_wait)} after subtracting data_wait_frac"
    # Of that host time, launching is at most the host time of the ops that launch GPU work
    # (or launches x the cost of one): the rest is host work that fusion and CUDA graphs do
    # not remove (gpu-underutilized names it).
    cap = launch_cap(facts, t["launch_us"])
    capped = cap is not None and cap.frac < launch_wait
    if cap is not None and capped:
        launch_wait = cap.frac
        note += f"; launch overhead is at most {pct(cap.frac)}"
    if launch_wait < t["host_wait_frac"]:
        return None
    kernels = num(facts, "kernels_per_step")
    count = f" {kernels:.0f} kernels per step," if kernels is not None else ""
    return Finding(
        rule_id=LAUNCH_BOUND,
        severity=severity_for_gain(launch_wait, floor="warning"),
        title=f"Launch-bound: the GPU waits for the host {pct(launch_wait)} of the step",
        explanation=(
            f"The GPU sat idle waiting for the next launch {pct(launch_wait)} of the step "
            f"{_BESIDE_DATA_AND_SYNCS if busy is not None else '(beyond data waits)'}, "
            f"with{count} a median kernel of {kernel_us:.0f} µs: Python "
            "and launch overhead outrun the kernels. torch.compile fuses kernels, "
            "mode='reduce-overhead' replays them as a CUDA graph, and a larger batch makes each "
            "kernel longer."
        ),
        evidence=(
            ev(fact, measured, t["host_wait_frac"], ">=", note=note),
            ev("kernel_us_p50", kernel_us, t["max_kernel_us_p50"], "<=", unit=" µs"),
            *seen(
                facts,
                "gpu_idle_host_data_frac",
                "gpu_idle_host_sync_frac",
                "kernels_per_step",
                "gpu_busy_frac",
                "cpu_op_count_per_step",
            ),
            *((cap.evidence(measured),) if cap is not None and capped else ()),
        ),
        gain=GainEstimate(
            step_time_frac=launch_wait,
            method="host-wait idle share of the step, assuming graphs/fusion remove it"
            + (f", at most what launches cost the host ({cap.short()})" if cap and capped else ""),
        ),
    )


def check_tiny_kernels(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    # Only dispatch gaps before already-queued kernels: a kernel that waits on an event,
    # another stream or a peer rank (gpu_idle_dependency_wait_frac) gains nothing from fusion.
    gaps = num(facts, "gpu_idle_launch_gap_frac")
    kernel_us = num(facts, "kernel_us_p50")
    kernels = num(facts, "kernels_per_step")
    if gaps is None or kernel_us is None or kernels is None:
        return None
    if gaps < t["launch_gap_frac"] or kernel_us > t["max_kernel_us_p50"]:
        return None
    if kernels < t["min_kernels_per_step"]:
        return None
    return Finding(
        rule_id=TINY_KERNELS,
        severity=severity_for_gain(gaps),
        title=f"{kernels:.0f} tiny kernels per step (median {kernel_us:.0f} µs)",
        explanation=(
            f"Kernels are so short (median {kernel_us:.1f} µs) that the gaps between them "
            f"take {pct(gaps)} of the step. Fusing element-wise chains with torch.compile "
            "removes both the launches and the memory round trips."
        ),
        evidence=(
            ev("gpu_idle_launch_gap_frac", gaps, t["launch_gap_frac"], ">="),
            ev("kernel_us_p50", kernel_us, t["max_kernel_us_p50"], "<=", unit=" µs"),
            ev("kernels_per_step", kernels, t["min_kernels_per_step"], ">="),
        ),
        gain=GainEstimate(
            step_time_frac=gaps,
            method="inter-kernel idle share, assuming fusion removes the gaps",
        ),
    )


RULES = (
    Rule(
        id=LAUNCH_BOUND,
        title="GPU waits for kernel launches (host/Python overhead)",
        area="launch",
        needs=("device_is_cuda", "gpu_idle_host_wait_frac", "kernel_us_p50"),
        uses=(
            "gpu_idle_host_busy_frac",
            "gpu_idle_host_data_frac",
            "gpu_idle_host_sync_frac",
            "data_wait_frac",
            "kernels_per_step",
            "gpu_busy_frac",
            "cpu_op_count_per_step",
            "gpu_window_launch_count",
            "gpu_window_ms",
            "launch_call_us_mean",
            "launch_ops_host_frac",
        ),
        thresholds={
            "host_wait_frac": 0.15,
            "max_kernel_us_p50": 50.0,
            "launch_us": TYPICAL_LAUNCH_US,
        },
        source=(
            "host wait: HTA get_idle_time_breakdown (hta/analyzers/breakdown_analysis.py, "
            "'host wait' idle); 15%: TF-xprof op_stats_to_overview_page.cc kernel-launch "
            "'high' >= 15%; 50 µs: HTA get_cuda_kernel_launch_stats runtime_cutoff=50; "
            + LAUNCH_US_SOURCE
        ),
        description=(
            "Idle GPU time where the next kernel's launch started after the previous kernel "
            "ended, while the launching thread was neither in the DataLoader nor returning "
            "from a host sync (from the trace; without it: minus data waits), with short "
            "kernels; at most the host time of the ops that launch GPU work (what CUDA graphs "
            "remove at most; without CPU ops, the window's launches x the cost of one)."
        ),
        check=check_launch_bound,
        device="cuda",
        optimizations=("compile-cudagraphs", "compile", "larger-batch"),
        root_cause=_LAUNCH_OVERHEAD,
    ),
    Rule(
        id=TINY_KERNELS,
        title="Many tiny back-to-back kernels",
        area="launch",
        needs=(
            "device_is_cuda",
            "gpu_idle_launch_gap_frac",
            "kernel_us_p50",
            "kernels_per_step",
        ),
        thresholds={
            "launch_gap_frac": 0.10,
            "max_kernel_us_p50": 20.0,
            "min_kernels_per_step": 100.0,
        },
        source=(
            "HTA get_idle_time_breakdown 'kernel wait' (queued-kernel gaps; its 'other' "
            "category, waits on events and peers, is left out) and "
            "get_frequent_cuda_kernel_sequences (fusion candidates); gaps up to "
            "trace_gpu.LAUNCH_GAP_MAX_US = 10 µs; 20 µs: HTA docs 'launch time on the CPU "
            "side is usually 5-20 µs'; 10% idle and 100 kernels per step: choices here"
        ),
        description=(
            "Short kernels with idle dispatch gaps between queued kernels: fusion candidates. "
            "Gaps where queued work waits on another stream, an event or a peer rank are "
            "dependency waits and do not count."
        ),
        check=check_tiny_kernels,
        device="cuda",
        optimizations=("compile", "compile-cudagraphs"),
        root_cause=_LAUNCH_OVERHEAD,
    ),
)
