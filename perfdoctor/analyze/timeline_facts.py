"""The trace facts of issue 22's timeline work, in one place: allocator calls, whether both
sides of the GPU work were captured, training or inference, and the GPU-side step.

`trace.summarize_trace` stores them on TraceSummary.timeline_facts; analyze/facts.py adds
them to the run's facts as they are (names documented in fact_catalog.py).
"""

from __future__ import annotations

from perfdoctor.analyze.allocator_calls import allocator_calls
from perfdoctor.analyze.capture_check import capture_sides
from perfdoctor.analyze.gpu_steps import gpu_steps
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_gpu import GpuSummary
from perfdoctor.analyze.trace_index import Steps
from perfdoctor.analyze.workload_kind import workload_kind
from perfdoctor.model import Scalar


def timeline_facts(ev: TraceEvents, steps: Steps, gpu: GpuSummary | None) -> dict[str, Scalar]:
    out: dict[str, Scalar] = {}
    out.update(_allocator(ev, steps, gpu))
    sides = capture_sides(ev)
    out.update(
        {
            "trace_kernel_launch_count": sides.launch_calls,
            "trace_copy_call_count": sides.copy_calls,
            "trace_cpu_op_count": sides.cpu_ops,
            "trace_kernel_count": sides.kernels,
            "trace_gpu_op_count": sides.gpu_ops,
            "trace_gpu_unlaunched_count": sides.unlaunched,
            "trace_profiler_range_count": sides.profiler_ranges,
        }
    )
    kind = workload_kind(ev)
    out["workload_kind"] = kind.kind
    out["workload_kind_evidence"] = "; ".join(kind.evidence) if kind.evidence else None
    out["graphs_or_compiled"] = kind.graphs_or_compiled
    on_gpu = gpu_steps(ev)
    out["gpu_step_count"] = on_gpu.count if on_gpu.count else None
    out["gpu_step_ms_p50"] = on_gpu.p50_ms
    return out


def _allocator(ev: TraceEvents, steps: Steps, gpu: GpuSummary | None) -> dict[str, Scalar]:
    a = allocator_calls(ev, steps)
    if a.window_us <= 0:
        return {}
    out: dict[str, Scalar] = {
        "alloc_call_count": a.calls,
        "alloc_syncing_free_count": a.frees,
        "alloc_call_frac": a.call_us / a.window_us,
        "alloc_calls_per_step": a.calls / a.per_step_divisor if a.per_step_divisor else None,
        "alloc_call_ms_per_step": a.call_us / 1000.0 / a.per_step_divisor
        if a.per_step_divisor
        else None,
        "empty_cache_call_count": a.empty_cache_calls,
    }
    if gpu is not None and a.gpu_idle_us is not None and gpu.window_us > 0:
        idle = a.gpu_idle_us / gpu.window_us
        out["gpu_idle_alloc_frac"] = idle
        if gpu.idle_host_busy_frac is not None:
            # The allocator's idle time was counted as the host's other work (a free is
            # neither a launch nor a sync call there): carve it out, so that the host-busy row
            # and the launch-overhead cause do not claim it too.
            out["gpu_idle_alloc_frac"] = min(idle, gpu.idle_host_busy_frac)
            out["gpu_idle_host_busy_frac"] = gpu.idle_host_busy_frac - min(
                idle, gpu.idle_host_busy_frac
            )
    return out
