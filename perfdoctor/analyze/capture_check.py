"""Whether a trace holds both sides of the GPU work: the host's launches and the GPU's ops.

Kineto fills the GPU side from CUPTI (roctracer on ROCm) in a buffer it flushes when the
profiler stops. When those records are lost, the trace still shows every cudaLaunchKernel on
the host and no kernel at all: CUPTI could not attach (ERR_NVGPUCTRPERM, a Kineto built for
another driver), the profiler was never stopped cleanly (the process exited or was killed
before the trace was flushed), or the activities left CUDA out. The opposite, GPU ops and no
launch calls or CPU ops, is a trace recorded with activities=[CUDA] only, or one whose host
threads were filtered out. Either way the GPU analysis is not measuring the run, and "no
bottleneck" would read as a clean bill of health.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.kernels import is_copy_call, is_launch_call
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, TraceEvents
from perfdoctor.analyze.trace_index import launch_rows, rows_named


@dataclass(frozen=True)
class CaptureSides:
    launch_calls: int  # kernel launches (and graph launches) on the host
    copy_calls: int  # memcpy/memset calls on the host
    cpu_ops: int
    kernels: int  # kernels on the GPU timeline
    gpu_ops: int  # kernels, copies and memsets
    unlaunched: int  # GPU ops whose launch call is not in the trace
    profiler_ranges: int  # kernels recorded by CUPTI's range profiler (counters, no timeline)


def capture_sides(ev: TraceEvents) -> CaptureSides:
    rt = ev.runtime
    gpu = ev.gpu
    launched = launch_rows(ev, np.arange(len(gpu))) if len(gpu) else np.empty(0, dtype=np.int64)
    return CaptureSides(
        launch_calls=int(rows_named(rt, ev.code_mask(is_launch_call)).size),
        copy_calls=int(rows_named(rt, ev.code_mask(is_copy_call)).size),
        cpu_ops=len(ev.cpu_ops),
        kernels=int((gpu.col("kind") == GPU_KIND_KERNEL).sum()) if len(gpu) else 0,
        gpu_ops=len(gpu),
        unlaunched=int((launched < 0).sum()),
        profiler_ranges=ev.profiler_range_count,
    )
