"""A trace that lost one side of the GPU work is a capture problem, not a clean bill of health.

Launches on the host and no kernel or copy on the GPU: CUPTI's (roctracer's) activity
records never reached the trace. GPU ops with no launch call and no CPU op: the host side
was not recorded. Either way every GPU figure of the diagnosis is missing or wrong, and the
fix is to record again, not to change the training code.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, num, seen

TRACE_CAPTURE = "trace-capture-incomplete"

RERECORD_GPU = (
    "record again with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]; let the "
    "profiler stop before the process exits (leave the `with profile(...)` block or call "
    "prof.stop(); a killed or os._exit()-ed process never flushes CUPTI's buffers); use a "
    "schedule with warmup=1 or more (schedule(wait=1, warmup=1, active=3)) so CUPTI is "
    "attached before the recorded steps; on NVIDIA, a CUPTI_ERROR_INSUFFICIENT_PRIVILEGES / "
    "ERR_NVGPUCTRPERM warning in the log means the driver denies profiling to this user "
    "(run with the NVreg_RestrictProfilingToAdminUsers=0 driver option, or as admin, or in "
    "a container with --cap-add SYS_ADMIN); a 'CUPTI initialization failed' / kineto "
    "warning means torch's CUPTI does not match the driver (update the driver or install "
    "the torch build for it); on ROCm, roctracer must match the installed ROCm"
)
RERECORD_HOST = (
    "Record again with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], so that "
    "the runtime's launch calls (cuda_runtime / cuda_driver events) are in the trace, and "
    "do not filter the host threads or those categories out of the file"
)


def check_trace_capture(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    launches = num(facts, "trace_kernel_launch_count") or 0.0
    copies = num(facts, "trace_copy_call_count") or 0.0
    kernels = num(facts, "trace_kernel_count") or 0.0
    gpu_ops = num(facts, "trace_gpu_op_count") or 0.0
    cpu_ops = num(facts, "trace_cpu_op_count") or 0.0
    evidence = seen(
        facts,
        "trace_kernel_launch_count",
        "trace_copy_call_count",
        "trace_kernel_count",
        "trace_gpu_op_count",
        "trace_cpu_op_count",
    )
    ranges = num(facts, "trace_profiler_range_count") or 0.0
    if launches >= t["min_launches"] and gpu_ops == 0 and ranges > 0:
        return Finding(
            rule_id=TRACE_CAPTURE,
            severity="warning",
            title=f"The trace holds kernel counters, not a GPU timeline: {ranges:.0f} CUPTI "
            "profiler ranges and no kernel activity",
            explanation=(
                f"The host launched {launches:.0f} kernels and CUPTI's range profiler measured "
                f"{ranges:.0f} of them (cuda_profiler_range events, recorded with "
                "experimental_config=_ExperimentalConfig(profiler_metrics=[...])); in that mode "
                "kernels are not recorded on the GPU timeline, so busy time, idle causes and "
                "kernel durations cannot be measured. For a timeline, record again without "
                "profiler_metrics, with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]."
            ),
            evidence=(ev("trace_profiler_range_count", int(ranges), 0, ">"), *evidence),
            gain=GainEstimate(method="not a performance finding: the trace has no timeline"),
        )
    if launches >= t["min_launches"] and gpu_ops == 0:
        return Finding(
            rule_id=TRACE_CAPTURE,
            severity="critical",
            title=f"The trace lost its GPU side: {launches:.0f} kernel launches on the host, "
            "no kernel or copy on the GPU",
            explanation=(
                f"The host launched {launches:.0f} kernels"
                + (f" and issued {copies:.0f} copies" if copies else "")
                + ", but the trace holds no GPU activity: CUPTI's records are missing, so "
                "GPU busy time, idle causes and kernels cannot be measured and no "
                "bottleneck can be ruled out. To fix the recording: " + RERECORD_GPU + "."
            ),
            evidence=(ev("trace_gpu_op_count", int(gpu_ops), 0, "=="), *evidence),
            gain=GainEstimate(method="not a performance finding: the trace is incomplete"),
        )
    if launches >= t["min_launches"] and kernels == 0 and gpu_ops > 0:
        return Finding(
            rule_id=TRACE_CAPTURE,
            severity="critical",
            title=f"The trace lost its kernels: {launches:.0f} kernel launches on the host, "
            "no kernel on the GPU",
            explanation=(
                f"The host launched {launches:.0f} kernels and the GPU timeline shows only "
                f"{gpu_ops:.0f} copies or memsets: CUPTI's kernel records are missing. "
                "To fix the recording: " + RERECORD_GPU + "."
            ),
            evidence=(ev("trace_kernel_count", int(kernels), 0, "=="), *evidence),
            gain=GainEstimate(method="not a performance finding: the trace is incomplete"),
        )
    if gpu_ops >= t["min_launches"] and launches + copies == 0:
        what = "no CPU op and no launch call" if cpu_ops == 0 else "no launch call"
        return Finding(
            rule_id=TRACE_CAPTURE,
            severity="warning",
            title=f"The trace has no host side: {gpu_ops:.0f} GPU ops, {what}",
            explanation=(
                "Busy time and kernels are measured, but why the GPU idles (input, syncs, "
                "launches) is not: no GPU op can be linked to the host call that queued it. "
                + RERECORD_HOST
                + "."
            ),
            evidence=(ev("trace_kernel_launch_count", int(launches), 0, "=="), *evidence),
            gain=GainEstimate(method="not a performance finding: the trace is incomplete"),
        )
    return None


RULES = (
    Rule(
        id=TRACE_CAPTURE,
        title="The trace lost its GPU side (or its host side)",
        area="measurement",
        needs=("trace_kernel_launch_count", "trace_gpu_op_count"),
        uses=(
            "trace_copy_call_count",
            "trace_kernel_count",
            "trace_cpu_op_count",
            "trace_profiler_range_count",
        ),
        thresholds={"min_launches": 10.0},
        source=(
            "10 launches: a trace of any training or inference step launches far more "
            "(issue 22's lost trace had 260); fewer could be a set-up-only trace where an "
            "empty GPU side is plausible (choice here)"
        ),
        description=(
            "Kernel launches on the host with no kernel or copy on the GPU (CUPTI records "
            "lost), or GPU ops with no launch call and no CPU op: names it a capture "
            "problem and says how to record again."
        ),
        check=check_trace_capture,
        device="cuda",
    ),
)
