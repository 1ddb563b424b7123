"""Device memory allocation in a trace: the runtime's malloc/free calls and `empty_cache`.

PyTorch's caching allocator calls cudaMalloc/hipMalloc only when its cache cannot serve a
request, and cudaFree/hipFree only when it empties the cache (`torch.cuda.empty_cache()`, a
retry after a failed allocation) or when caching is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1,
PYTORCH_NO_HIP_MEMORY_CACHING=1). In a steady training step there are none. cudaFree and
hipFree synchronize the device before they return, so a step full of them idles the GPU
while the host waits: the "allocator storm" of issue 22 (1,360 hipFree calls, 98.7% of the
window). Expandable segments (cuMemCreate/cuMemMap, hipMemCreate/hipMemMap) grow the pool
with driver calls that show up here too.

The share of the GPU's idle time the allocator explains is the idle time (no op on the
training device) during which a host thread sat in one of these calls: the host-busy idle
share of the GPU timeline less this is what launches and Python are left with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import Steps, rows_named

# Device memory allocation calls of the CUDA runtime and driver and of HIP (the *Async
# variants are stream-ordered; the cuMem*/hipMem* virtual-memory calls are what expandable
# segments use to map more memory into a segment).
ALLOC_CALLS = frozenset(
    {
        "cudaMalloc",
        "cudaMallocAsync",
        "cudaMallocFromPoolAsync",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemAllocAsync",
        "cuMemCreate",
        "cuMemMap",
        "cuMemAddressReserve",
        "cuMemSetAccess",
        "hipMalloc",
        "hipExtMallocWithFlags",
        "hipMallocAsync",
        "hipMallocFromPoolAsync",
        "hipMemCreate",
        "hipMemMap",
        "hipMemAddressReserve",
        "hipMemSetAccess",
    }
)
FREE_CALLS = frozenset(
    {
        "cudaFree",
        "cudaFreeAsync",
        "cuMemFree",
        "cuMemFree_v2",
        "cuMemFreeAsync",
        "cuMemUnmap",
        "cuMemRelease",
        "cuMemAddressFree",
        "hipFree",
        "hipFreeAsync",
        "hipMemUnmap",
        "hipMemRelease",
        "hipMemAddressFree",
    }
)
# The frees that wait for the device before returning (the stream-ordered ones do not).
SYNCING_FREES = frozenset({"cudaFree", "cuMemFree", "cuMemFree_v2", "hipFree"})


def is_allocator_call(name: str) -> bool:
    return name in ALLOC_CALLS or name in FREE_CALLS


def is_empty_cache(name: str) -> bool:
    """torch.cuda.empty_cache as a Python frame (`torch/cuda/memory.py(…): empty_cache`) or
    a record_function / op of that name."""
    return name.endswith(": empty_cache") or name in {"empty_cache", "torch.cuda.empty_cache"}


@dataclass(frozen=True)
class AllocatorCalls:
    calls: int  # malloc and free calls in the window
    frees: int  # of them, the frees that synchronize the device
    call_us: float  # union of their host time in the window
    window_us: float  # the window they were counted in
    gpu_idle_us: float | None  # device idle while a host thread sat in one (None: no GPU ops)
    empty_cache_calls: int
    per_step_divisor: int  # ProfilerStep count, 0 without steps


def allocator_calls(ev: TraceEvents, steps: Steps) -> AllocatorCalls:
    """The calls inside the profiled steps (the whole trace without steps)."""
    rt = ev.runtime
    rows = rows_named(rt, ev.code_mask(is_allocator_call))
    lo, hi = _window(ev, steps)
    inside = rows[(rt.ts[rows] < hi) & (rt.end[rows] > lo)]
    if steps.count:
        inside = inside[steps.contains(rt.ts[inside])]
    names = [ev.names[c] for c in rt.name[inside].tolist()]
    cs, ce = intervals.union(rt.ts[inside], rt.end[inside])
    cs, ce = intervals.clip(cs, ce, np.array([lo]), np.array([hi]))
    return AllocatorCalls(
        calls=int(inside.size),
        frees=sum(1 for n in names if n in SYNCING_FREES),
        call_us=intervals.total(cs, ce),
        window_us=max(hi - lo, 0.0),
        gpu_idle_us=_gpu_idle_during(ev, cs, ce, lo, hi),
        empty_cache_calls=_empty_cache_calls(ev, steps),
        per_step_divisor=steps.count,
    )


def _window(ev: TraceEvents, steps: Steps) -> tuple[float, float]:
    """The profiled steps' span; without steps, the device ops' span (the GPU window), or
    everything the host recorded when there are none."""
    if steps.count:
        return float(steps.lo[0]), float(steps.hi[-1])
    tables = [t for t in (ev.gpu,) if len(t)] or [t for t in (ev.cpu_ops, ev.runtime) if len(t)]
    if not tables:
        return 0.0, 0.0
    return float(min(t.ts.min() for t in tables)), float(max(t.end.max() for t in tables))


def _gpu_idle_during(
    ev: TraceEvents, cs: np.ndarray, ce: np.ndarray, lo: float, hi: float
) -> float | None:
    """Time in [lo, hi] with a host thread in an allocator call and no op on the busiest
    device (the one trace_gpu summarises)."""
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    devices = gpu.col("device")
    busiest = max(np.unique(devices).tolist(), key=lambda d: float(gpu.dur[devices == d].sum()))
    mine = devices == busiest
    bs, be = intervals.union(gpu.ts[mine], gpu.end[mine])
    window = (np.array([lo]), np.array([hi]))
    idle_s, idle_e = intervals.subtract(*window, bs, be)
    return intervals.total(*intervals.clip(cs, ce, idle_s, idle_e))


def _empty_cache_calls(ev: TraceEvents, steps: Steps) -> int:
    count = 0
    mask = ev.code_mask(is_empty_cache)
    for table in (ev.python, ev.cpu_ops, ev.annotations):
        rows = rows_named(table, mask)
        count += int(steps.contains(table.ts[rows]).sum())
    return count
