"""GPU under-utilization, with its biggest cause named (input, host launches, syncs, batch).

The finding names the rule of its cause in `related`, so that when that rule fires too the
engine merges both into one headline: one root cause, one finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from perfdoctor.model import Evidence, Facts, Finding, GainEstimate
from perfdoctor.rules import timeline_causes
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, text
from perfdoctor.rules.input_pipeline import INPUT_BOUND
from perfdoctor.rules.launch import LAUNCH_BOUND
from perfdoctor.rules.launch_cost import (
    LAUNCH_US_SOURCE,
    TYPICAL_LAUNCH_US,
    launch_cap,
)
from perfdoctor.rules.lowp import LOWP_SOURCE, computes_in_low_precision
from perfdoctor.rules.memory import MEMORY_UNDERUSED
from perfdoctor.rules.multigpu import COMMUNICATION_HEAVY
from perfdoctor.rules.sync import HOST_SYNCS

GPU_UNDERUTILIZED = "gpu-underutilized"
GPU_BOUND = "gpu-bound"


@dataclass(frozen=True)
class _Cause:
    name: str
    share: float | None  # of the step; None when not estimable
    rule_id: str
    optimizations: tuple[str, ...]
    advice: str
    fixable: bool = True  # False: the trace shows the idle time, not a cause to remove
    # What its optimizations can win back when that is less than its share (None: the share;
    # no optimizations: nothing), and how that was found ("": the default wording).
    gain_share: float | None = None
    gain_method: str = ""
    evidence: tuple[Evidence, ...] = ()


def _host_busy_causes(facts: Facts, t: Mapping[str, float], host_busy: float) -> list[_Cause]:
    """The host-busy idle time, split into what launching can account for (what fusion and
    CUDA graphs remove: the gain) and the host's other work between launches, for which the
    trace names no fix."""
    optimizations = ("compile-cudagraphs", "compile", "larger-batch")
    launch = _Cause(
        "kernel launch overhead",
        host_busy,
        LAUNCH_BOUND,
        optimizations,
        "launch less often (torch.compile, CUDA graphs, a larger batch)",
    )
    cap = launch_cap(facts, t["launch_us"])
    if cap is None or cap.frac >= host_busy:
        return [launch]
    evidence = (
        ev("gpu_idle_host_busy_frac", host_busy),
        *seen(facts, "launch_call_us_mean"),
        cap.evidence(host_busy),
    )
    capped = f"at most what launches cost the host ({cap.short()})"
    other = host_busy - cap.frac
    # The launches' part, however small beside the rest, is still what compile and graphs
    # win back: promised where it is worth naming, with the rest left out of the gain.
    worth = cap.frac >= t["cause_frac"]
    return [
        replace(
            launch,
            share=cap.frac,
            gain_method=f"the launch overhead's share of the step, {capped}",
            evidence=evidence,
        ),
        _Cause(
            "host work between launches that is not launch overhead",
            other,
            LAUNCH_BOUND if worth else "",
            optimizations if worth else (),
            f"the host was busy {pct(other)} of the window beyond what its "
            f"{cap.launches:.0f} launches cost: set-up work (the first iterations' cuDNN "
            "autotuning, lazy module loading, allocation), data preparation, or Python and op "
            "dispatch between launches; torch.compile removes the part that is the model's "
            "own Python, which the trace cannot tell apart: look at the host's longest ops "
            "in the window, and profile steps after warm-up"
            + (
                f"; launching less often (torch.compile, CUDA graphs) wins back the "
                f"{pct(cap.frac)} the launches cost"
                if worth
                else ""
            ),
            gain_share=cap.frac,
            gain_method=(
                f"only the launch overhead in it, {capped}; none for the host's other work "
                "between launches, which is not launch overhead"
                if worth
                else "not estimated: the host's work between launches is not launch "
                f"overhead, so torch.compile / CUDA graphs promise nothing for it; launches "
                f"cost the host {cap.short()}"
            ),
            evidence=evidence,
        ),
    ]


def _causes(facts: Facts, t: Mapping[str, float]) -> list[_Cause]:
    data_wait = timeline_causes.input_share(facts)
    host_wait = num(facts, "gpu_idle_host_wait_frac")
    sync_ms = num(facts, "host_sync_ms_per_step")
    step_ms = num(facts, "step_ms_p50")
    causes = []
    if data_wait is not None:
        causes.append(
            _Cause(
                "waiting for input data",
                data_wait,
                INPUT_BOUND,
                ("dataloader-workers", "pin-memory", "faster-data-pipeline"),
                "feed it faster (DataLoader workers, pinned memory)",
            )
        )
    host_busy = num(facts, "gpu_idle_host_busy_frac")
    if host_wait is not None:
        busy_share = (
            host_busy if host_busy is not None else max(0.0, host_wait - (data_wait or 0.0))
        )
        causes.extend(_host_busy_causes(facts, t, busy_share))
    dependency = num(facts, "gpu_idle_dependency_wait_frac")
    if dependency is not None:
        causes.append(
            _Cause(
                "queued work waiting on events, other streams or peer ranks",
                dependency,
                COMMUNICATION_HEAVY,
                (),
                "find what the queued kernels wait for: a cross-stream event, a slower peer "
                "rank in a send/recv or all-reduce (compare the ranks), a host-side wait",
            )
        )
    host_sync = num(facts, "gpu_idle_host_sync_frac")
    if host_sync is not None:  # measured on the GPU timeline: preferred over the host's view
        causes.append(
            _Cause(
                "host synchronizations",
                host_sync,
                HOST_SYNCS,
                ("remove-host-syncs",),
                "remove the per-step syncs that drain the GPU's queue",
            )
        )
    elif sync_ms is not None and step_ms:
        causes.append(
            _Cause(
                "host synchronizations",
                min(1.0, sync_ms / step_ms),
                HOST_SYNCS,
                ("remove-host-syncs",),
                "remove the per-step syncs",
            )
        )
    unrecorded = num(facts, "gpu_idle_host_unrecorded_frac")
    if unrecorded is not None:
        causes.append(
            _Cause(
                "host time the trace does not record (the trace's tail, or gaps in it with "
                "nothing launched or recorded)",
                unrecorded,
                "",
                (),
                "after the launching thread's last recorded event, and in stretches of 100 µs "
                "or more with no CPU op, runtime call or Python frame on any host thread, the "
                "trace shows no host work and no launch, so it names nothing to fix: the step's "
                "span outlasts its work (the profiler kept recording), the trace was filtered, "
                "or the host ran code the profiler does not see; profile steps that do the "
                "training work",
                fixable=False,
            )
        )
    causes.extend(
        _Cause(c.name, c.share, c.rule_id, c.optimizations, c.advice)
        for c in timeline_causes.extra_causes(facts)
    )
    return causes


def check_gpu_underutilized(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    busy = num(facts, "gpu_busy_frac")
    if busy is None or busy >= t["busy_frac"]:
        return None
    idle = 1.0 - busy
    known = [c for c in _causes(facts, t) if c.share is not None and c.share >= t["cause_frac"]]
    cause = max(known, key=lambda c: c.share or 0.0, default=None)
    if cause is None:
        mem = num(facts, "peak_allocated_frac")
        small = mem is not None and mem < t["small_batch_mem_frac"]
        cause = _Cause(
            "small batch: each kernel has too little work" if small else "no single cause",
            None,
            MEMORY_UNDERUSED,
            ("larger-batch",),
            "give each kernel more work (a larger batch)",
        )
    promised = cause.gain_share if cause.gain_share is not None else cause.share
    if not cause.fixable or not cause.optimizations:
        promised = None
    gain = None if promised is None else min(promised, idle)
    share_text = f" ({pct(cause.share)} of the step)" if cause.share is not None else ""
    return Finding(
        rule_id=GPU_UNDERUTILIZED,
        # A tail the trace cannot explain is a caveat on the profiled span, not a measured
        # loss: at most a warning, however idle it leaves the GPU.
        severity="critical" if busy < t["critical_busy_frac"] and cause.fixable else "warning",
        title=f"GPU busy only {pct(busy)} of the step; biggest cause: {cause.name}",
        explanation=(
            f"Kernels and copies keep the GPU busy {pct(busy)} of each step, so it idles "
            f"{pct(idle)}. The biggest measured cause is {cause.name}{share_text}: "
            f"{cause.advice}."
        ),
        evidence=(
            ev("gpu_busy_frac", busy, t["busy_frac"], "<"),
            *seen(
                facts,
                "gpu_util_mean_frac",
                "data_wait_frac",
                "gpu_idle_host_wait_frac",
                "host_sync_ms_per_step",
                "peak_allocated_frac",
                *(() if cause.fixable else ("gpu_idle_host_unrecorded_frac",)),
            ),
            *cause.evidence,
        ),
        optimizations=cause.optimizations,
        gain=GainEstimate(
            step_time_frac=gain,
            method=cause.gain_method
            or (
                "share of the step lost to the biggest cause, at most the GPU's idle share"
                if gain is not None
                else "not estimated: the trace records no cause for this idle time"
                if not cause.fixable
                else "not estimated: depends on how kernels scale with batch"
            ),
        ),
        related=(cause.rule_id,) if cause.rule_id else (),
    )


def _top_kernels_text(facts: Facts, count: int = 3) -> str:
    trace = facts.settings.get("trace")
    gpu = trace.get("gpu") if isinstance(trace, dict) else None
    top = gpu.get("top_kernels") if isinstance(gpu, dict) else None
    if not isinstance(top, list) or not top:
        return ""
    names = []
    for k in top[:count]:
        if isinstance(k, dict) and isinstance(k.get("share"), (int, float)):
            name = " ".join(str(k.get("name", "")).split())
            name = name if len(name) <= 60 else name[:59] + "…"
            names.append(f"{name} ({pct(float(k['share']))})")
    return " The kernels that take the most time: " + "; ".join(names) + "." if names else ""


def _precision_text(facts: Facts, lowp_kernel_frac: float) -> str:
    """What the GEMMs already compute in, when that is low precision (no advice to give)."""
    lowp = num(facts, "lowp_matmul_kernel_frac")
    label = text(facts, "compute_precision")
    if lowp is None or label is None or lowp < lowp_kernel_frac:
        return ""
    return (
        f" The GEMM, convolution and attention kernels already compute in low precision "
        f"({pct(lowp)} of their time; mostly {label})."
    )


def check_gpu_bound(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    busy = num(facts, "gpu_busy_frac")
    compute = num(facts, "gpu_compute_frac")
    if busy is None or busy < t["busy_frac"]:
        return None
    # Busy with communication only is not kernels setting the pace: with the exposed
    # communication taken out, the compute must still fill the window (an MI300X DDP trace
    # said "64% exposed communication" and "the kernels themselves set the pace ->
    # torch.compile" side by side). The communication finding tells that story.
    exposed = num(facts, "gpu_comm_exposed_frac")
    if exposed is not None and busy - exposed < t["busy_frac"]:
        return None
    # The kernels say what the GEMMs compute in: fp32 GEMM/conv/attention kernels (SIMT or
    # TF32) are what autocast moves; a run already in bf16/fp8 gets no precision advice, and
    # kernels of unknown precision are not counted as fp32.
    fp32_matmul = num(facts, "fp32_matmul_kernel_frac")
    few_tensor_cores = (
        fp32_matmul is not None
        and fp32_matmul >= t["fp32_matmul_kernel_frac"]
        and not computes_in_low_precision(facts, t["lowp_kernel_frac"])
    )
    # Before Ampere (a V100 is 7.0) there is neither bf16 nor TF32: fp16 is the way in, as
    # the recommendation (amp-fp16 standing in for amp-bf16) says.
    cc = num(facts, "gpu_compute_capability")
    # AMD's matrix cores run fp32 GEMMs as fp32 MFMA (TF32 is an MI300-only hipBLASLt
    # option PyTorch does not switch on by allow_tf32): bf16 is the way in there.
    amd = text(facts, "gpu_vendor") == "amd"
    lower = (
        "fp16 autocast (with a GradScaler; this GPU has neither bf16 nor TF32)"
        if cc is not None and cc < 8.0
        else "bf16 autocast"
        if amd
        else "bf16 autocast (or TF32 for fp32 matmuls)"
    )
    precision = (
        f" {pct(fp32_matmul)} of the kernel time is GEMM, convolution and attention kernels "
        f"computing in fp32 ({'vector or fp32 MFMA' if amd else 'SIMT or TF32'}): {lower} "
        f"moves them onto {'bf16 matrix cores' if amd else 'tensor cores'}."
        if few_tensor_cores and fp32_matmul is not None
        else _precision_text(facts, t["lowp_kernel_frac"])
    )
    # Code already compiled (Triton/inductor kernels, CUDA graphs, a compiled root model):
    # torch.compile is no fix to offer; the kernels themselves are what is left.
    compiled = flag(facts, "graphs_or_compiled") is True or flag(facts, "model_compiled") is True
    fusion = (
        " The trace already runs compiled code (inductor/Triton kernels or CUDA graphs), so "
        "torch.compile is no further step: what is left is the kernels' own speed (the "
        "precision they compute in, shapes that fill the GPU, attention and GEMM backends)."
        if compiled
        else " torch.compile fuses element-wise and normalization chains into fewer kernels, "
        "and less precise math is faster math."
    )
    precision_fixes: tuple[str, ...] = (
        (("amp-bf16",) if amd else ("amp-bf16", "tf32")) if few_tensor_cores else ()
    )
    return Finding(
        rule_id=GPU_BOUND,
        # With few tensor cores in use there is a concrete fix, so it is worth a warning.
        severity="warning" if few_tensor_cores else "info",
        title=f"The GPU is busy {pct(busy)} of the time: the kernels themselves set the pace",
        explanation=(
            f"GPU ops run {pct(busy)} of the GPU window"
            + (f" ({pct(compute)} in compute kernels)" if compute is not None else "")
            + ", so the host, the input pipeline and launches are not what holds this step "
            "back: faster kernels are." + fusion + precision + _top_kernels_text(facts)
        ),
        evidence=(
            ev("gpu_busy_frac", busy, t["busy_frac"], ">="),
            *seen(
                facts,
                "gpu_compute_frac",
                "gpu_comm_exposed_frac",
                "fp32_matmul_kernel_frac",
                "lowp_matmul_kernel_frac",
                "tensor_core_kernel_frac",
            ),
        ),
        optimizations=precision_fixes if compiled else (*precision_fixes, "compile"),
        gain=GainEstimate(method="not estimated: depends on which kernels get faster"),
    )


RULES = (
    Rule(
        id=GPU_BOUND,
        title="GPU-bound: the GPU is busy nearly all the time",
        area="utilization",
        needs=("device_is_cuda", "gpu_busy_frac"),
        uses=(
            "gpu_compute_frac",
            "gpu_comm_exposed_frac",
            "tensor_core_kernel_frac",
            "gpu_compute_capability",
            "fp32_matmul_kernel_frac",
            "lowp_matmul_kernel_frac",
            "compute_precision",
            "autocast_used",
            "gpu_vendor",
            "graphs_or_compiled",
            "model_compiled",
        ),
        thresholds={"busy_frac": 0.85, "fp32_matmul_kernel_frac": 0.2, "lowp_kernel_frac": 0.5},
        source=(
            "85% busy: the complement of HTA's idle share at which its docs stop looking at "
            "idle time and point at kernel optimisation (choice here), counted without the "
            "exposed communication (busy only communicating is the communication rule's); "
            "the top kernels are "
            "HTA's get_gpu_kernel_breakdown and tb_plugin's Kernel view; fp32 GEMM/conv/attention "
            "kernels >= 20% of kernel time (kernel names, analyze/kernel_precision.py): choice "
            f"here, from which AMP/TF32 are worth trying; {LOWP_SOURCE}"
        ),
        description=(
            "When idle time is not the problem, says so, names the kernels that take the time "
            "and whether they use tensor cores."
        ),
        check=check_gpu_bound,
        selects_optimizations=True,
        device="cuda",
        optimizations=("amp-bf16", "tf32", "compile"),
    ),
    Rule(
        id=GPU_UNDERUTILIZED,
        title="GPU under-utilized, with its biggest cause",
        area="utilization",
        needs=("device_is_cuda", "gpu_busy_frac"),
        uses=(
            "data_wait_frac",
            "gpu_idle_host_wait_frac",
            "gpu_idle_dependency_wait_frac",
            "gpu_idle_host_busy_frac",
            "gpu_idle_host_sync_frac",
            "gpu_idle_host_unrecorded_frac",
            "gpu_idle_host_data_frac",
            "gpu_idle_alloc_frac",
            "gpu_idle_launch_gap_frac",
            "gpu_window_launch_count",
            "gpu_window_ms",
            "launch_call_us_mean",
            "launch_ops_host_frac",
            "host_sync_ms_per_step",
            "step_ms_p50",
            "peak_allocated_frac",
            "gpu_util_mean_frac",
        ),
        thresholds={
            "busy_frac": 0.5,
            "critical_busy_frac": 0.3,
            "cause_frac": 0.05,
            "small_batch_mem_frac": 0.25,
            # The host's cost of one launch when the trace measures none (launch_call_us_mean).
            "launch_us": TYPICAL_LAUNCH_US,
        },
        source=(
            "< 50%: torch-tb-profiler profiler/data.py rule 5 and nsys gpu_time_util "
            "(DEFAULT_THRESHOLD = 50); < 30% critical: TraceML system/policy.py 'low' band; "
            "naming the biggest non-GPU category: DLProf 'The GPU is underutilized' message; "
            + LAUNCH_US_SOURCE
        ),
        description=(
            "Union of kernel and copy time over the step span; names the biggest of input "
            "waits, launch overhead (at most the host time of the ops that launch GPU work: "
            "what CUDA graphs remove at most; without CPU ops, the window's launches x the "
            "host's cost of one), "
            "the host's other work between launches, syncs, dependencies, unrecorded host "
            "time, or a small batch."
        ),
        check=check_gpu_underutilized,
        selects_optimizations=True,
        device="cuda",
        optimizations=(
            "dataloader-workers",
            "pin-memory",
            "faster-data-pipeline",
            "compile-cudagraphs",
            "compile",
            "larger-batch",
            "remove-host-syncs",
        ),
    ),
)
