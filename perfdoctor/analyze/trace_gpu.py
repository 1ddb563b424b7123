"""GPU facts of a parsed trace: busy time, idle gaps and their cause, kernels, copies.

GPU activity rows (kernel, gpu_memcpy, gpu_memset) sit on pid = device, tid = stream. Each is
linked to the CPU call that launched it (cudaLaunchKernel, cudaMemcpyAsync, or
cuLaunchKernel in cuda_driver for Triton) by the `correlation` id.

Only the device with the most GPU time is summarised (the training device; other devices
appear in multi-GPU traces of one rank only through peer copies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.kernels import (
    is_comm_kernel,
    is_launch_call,
    is_tensor_core_kernel,
    is_triton_kernel,
)
from perfdoctor.analyze.trace_events import (
    GPU_KIND_KERNEL,
    GPU_KIND_MEMCPY,
    TraceEvents,
)
from perfdoctor.analyze.trace_host import Steps


@dataclass(frozen=True)
class GpuSummary:
    device: int
    busy_frac: float | None
    idle_host_wait_frac: float | None
    idle_between_kernels_frac: float | None
    kernels_per_step: float | None
    kernel_launches_per_step: float | None
    kernel_us_p50: float | None
    memcpy_ms_per_step: dict[str, float]  # "HtoD" / "DtoH" / "DtoD" / ... -> ms per step
    memcpy_bytes_per_step: dict[str, float]
    pageable_htod_count_per_step: float | None
    pageable_htod_frac: float | None  # by bytes (by count when bytes are missing)
    tensor_core_kernel_frac: float | None
    triton_kernels_per_step: float | None
    comm_kernel_frac: float | None
    kernel_ms_per_step: float | None


def _launch_rows(ev: TraceEvents, gpu_rows: np.ndarray) -> np.ndarray:
    """Runtime/driver row that launched each GPU row, -1 when it is not in the trace."""
    rt = ev.runtime
    out = np.full(gpu_rows.size, -1, dtype=np.int64)
    if len(rt) == 0 or gpu_rows.size == 0:
        return out
    launch = ev.code_mask(is_launch_call)[rt.name] | ev.code_mask(
        lambda n: n.startswith(("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset"))
    )[rt.name]
    rt_rows = np.flatnonzero(launch & (rt.col("correlation") >= 0))
    corr = rt.col("correlation")[rt_rows]
    order = np.argsort(corr, kind="stable")
    corr_sorted = corr[order]
    want = ev.gpu.col("correlation")[gpu_rows]
    if corr_sorted.size == 0:
        return out
    pos = np.clip(np.searchsorted(corr_sorted, want), 0, corr_sorted.size - 1)
    hit = (want >= 0) & (corr_sorted[pos] == want)
    out[hit] = rt_rows[order[pos[hit]]]
    return out


def summarize_gpu(ev: TraceEvents, steps: Steps) -> GpuSummary | None:
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    devices = gpu.col("device")
    uniq = np.unique(devices)
    busiest = max(uniq.tolist(), key=lambda d: float(gpu.dur[devices == d].sum()))
    rows = np.flatnonzero(devices == busiest)
    rows = rows[np.argsort(gpu.ts[rows], kind="stable")]
    starts, ends = gpu.ts[rows], gpu.end[rows]
    launch = _launch_rows(ev, rows)
    has_launch = launch >= 0
    launch_ts = np.where(has_launch, ev.runtime.ts[np.maximum(launch, 0)], np.nan)

    if steps.count:
        lo, hi = steps.lo, steps.hi
        n_steps = steps.count
        # A GPU op belongs to the step whose host code launched it (it may run later).
        anchor = np.where(has_launch, launch_ts, starts)
        in_steps = steps.contains(anchor)
    else:
        lo, hi = np.array([starts.min()]), np.array([ends.max()])
        n_steps = 0
        in_steps = np.ones(rows.size, dtype=bool)
    window = intervals.total(lo, hi)

    us, ue = intervals.union(starts, ends)
    busy = intervals.total(*intervals.clip(us, ue, lo, hi))
    host_wait, between = _idle_split(us, ue, starts, launch_ts, lo, hi)

    kind = gpu.col("kind")[rows]
    names = gpu.name[rows]
    is_kernel = (kind == GPU_KIND_KERNEL) & in_steps
    kernel_time = float(gpu.dur[rows][is_kernel].sum())
    tc = ev.code_mask(is_tensor_core_kernel)[names] & is_kernel
    comm = ev.code_mask(is_comm_kernel)[names] & is_kernel
    driver_launch = np.zeros(rows.size, dtype=bool)
    if len(ev.runtime):
        driver_launch[has_launch] = ev.runtime.col("driver")[launch[has_launch]]
    triton = (ev.code_mask(is_triton_kernel)[names] | driver_launch) & is_kernel

    memcpy_ms: dict[str, float] = {}
    memcpy_bytes: dict[str, float] = {}
    copies = np.flatnonzero((kind == GPU_KIND_MEMCPY) & in_steps)
    copy_bytes = gpu.col("bytes")[rows]
    pageable_count = 0
    pageable_bytes = htod_bytes = 0.0
    htod_count = 0
    for i in copies.tolist():
        label = ev.names[int(names[i])]
        parts = label.split()
        copy_kind = parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else "other"
        memcpy_ms[copy_kind] = memcpy_ms.get(copy_kind, 0.0) + float(gpu.dur[rows[i]]) / 1000.0
        nbytes = float(copy_bytes[i]) if np.isfinite(copy_bytes[i]) else 0.0
        memcpy_bytes[copy_kind] = memcpy_bytes.get(copy_kind, 0.0) + nbytes
        if copy_kind == "HtoD":
            htod_count += 1
            htod_bytes += nbytes
            if "Pageable" in label:
                pageable_count += 1
                pageable_bytes += nbytes

    def per_step(value: float) -> float | None:
        return value / n_steps if n_steps else None

    if htod_bytes > 0:
        pageable_frac: float | None = pageable_bytes / htod_bytes
    elif htod_count:
        pageable_frac = pageable_count / htod_count
    else:
        pageable_frac = None
    launches = (
        np.flatnonzero(ev.code_mask(is_launch_call)[ev.runtime.name])
        if len(ev.runtime)
        else np.empty(0, dtype=np.int64)
    )
    if n_steps:
        launches = launches[steps.contains(ev.runtime.ts[launches])]
    kernel_durs = gpu.dur[rows][is_kernel]
    return GpuSummary(
        device=int(busiest),
        busy_frac=busy / window if window > 0 else None,
        idle_host_wait_frac=host_wait / window if window > 0 else None,
        idle_between_kernels_frac=between / window if window > 0 else None,
        kernels_per_step=per_step(float(is_kernel.sum())),
        kernel_launches_per_step=per_step(float(launches.size)) if len(ev.runtime) else None,
        kernel_us_p50=float(np.median(kernel_durs)) if kernel_durs.size else None,
        memcpy_ms_per_step={k: v / n_steps for k, v in memcpy_ms.items()} if n_steps else {},
        memcpy_bytes_per_step={k: v / n_steps for k, v in memcpy_bytes.items()}
        if n_steps
        else {},
        pageable_htod_count_per_step=per_step(float(pageable_count)),
        pageable_htod_frac=pageable_frac,
        tensor_core_kernel_frac=float(gpu.dur[rows][tc].sum()) / kernel_time
        if kernel_time > 0
        else None,
        triton_kernels_per_step=per_step(float(triton.sum())),
        comm_kernel_frac=float(gpu.dur[rows][comm].sum()) / kernel_time
        if kernel_time > 0
        else None,
        kernel_ms_per_step=per_step(kernel_time / 1000.0),
    )


def _idle_split(
    us: np.ndarray,
    ue: np.ndarray,
    starts: np.ndarray,
    launch_ts: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> tuple[float, float]:
    """Idle time inside the windows, split by what the GPU was waiting for.

    HTA's rule: a gap is host wait when the op that ends it was launched by the CPU only
    after the previous op had finished (the GPU had nothing queued); otherwise the work was
    queued and the gap is between kernels (dependencies, cross-stream waits, launch latency).
    Time after the last op is host wait: nothing was queued. A gap whose next op has no
    launch record in the trace counts as between kernels.
    """
    # Gaps: before the first busy interval, between intervals, after the last.
    gap_lo = np.r_[-np.inf, ue]
    gap_hi = np.r_[us, np.inf]
    # The op ending gap k starts at us[k]; rows are sorted by start, so it is the first
    # row starting there.
    first_row = np.searchsorted(starts, us, side="left")
    next_launch = np.r_[launch_ts[first_row], np.nan]
    prev_end = gap_lo
    host = np.r_[next_launch[:-1] >= prev_end[:-1], True]
    host[:-1] &= np.isfinite(next_launch[:-1])
    host_wait = intervals.total(*intervals.clip(gap_lo[host], gap_hi[host], lo, hi))
    between = intervals.total(*intervals.clip(gap_lo[~host], gap_hi[~host], lo, hi))
    return host_wait, between
