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
from perfdoctor.analyze.trace_index import Steps, launch_rows


@dataclass(frozen=True)
class GpuSummary:
    """The three *_frac time shares are of the step window and add up to 1."""

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


@dataclass(frozen=True)
class _Copies:
    ms: dict[str, float]
    bytes: dict[str, float]
    pageable_htod: int
    pageable_htod_frac: float | None


def summarize_gpu(ev: TraceEvents, steps: Steps) -> GpuSummary | None:
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    devices = gpu.col("device")
    busiest = max(np.unique(devices).tolist(), key=lambda d: float(gpu.dur[devices == d].sum()))
    rows = np.flatnonzero(devices == busiest)
    rows = rows[np.argsort(gpu.ts[rows], kind="stable")]
    starts, ends, durs = gpu.ts[rows], gpu.end[rows], gpu.dur[rows]
    launch = launch_rows(ev, rows)
    has_launch = launch >= 0
    launch_ts = (
        np.where(has_launch, ev.runtime.ts[np.maximum(launch, 0)], np.nan)
        if len(ev.runtime)
        else np.full(rows.size, np.nan)
    )

    if steps.count:
        lo, hi = steps.lo, steps.hi
        # A GPU op belongs to the step whose host code launched it (it may run later).
        in_steps = steps.contains(np.where(has_launch, launch_ts, starts))
    else:
        lo, hi = np.array([starts.min()]), np.array([ends.max()])
        in_steps = np.ones(rows.size, dtype=bool)
    window = intervals.total(lo, hi)
    us, ue = intervals.union(starts, ends)
    busy = intervals.total(*intervals.clip(us, ue, lo, hi))
    host_wait, between = _idle_split(us, ue, starts, launch_ts, lo, hi)

    names = gpu.name[rows]
    kind = gpu.col("kind")[rows]
    kernels = (kind == GPU_KIND_KERNEL) & in_steps
    kernel_time = float(durs[kernels].sum())
    driver_launch = np.zeros(rows.size, dtype=bool)
    if len(ev.runtime):
        driver_launch[has_launch] = ev.runtime.col("driver")[launch[has_launch]]

    def kernel_share(flags: np.ndarray) -> float | None:
        return float(durs[flags & kernels].sum()) / kernel_time if kernel_time > 0 else None

    triton = (ev.code_mask(is_triton_kernel)[names] | driver_launch) & kernels
    copies = _copies(ev, rows, (kind == GPU_KIND_MEMCPY) & in_steps)
    launches = _launch_calls(ev, steps)
    return GpuSummary(
        device=int(busiest),
        busy_frac=busy / window if window > 0 else None,
        idle_host_wait_frac=host_wait / window if window > 0 else None,
        idle_between_kernels_frac=between / window if window > 0 else None,
        kernels_per_step=steps.per_step(float(kernels.sum())),
        kernel_launches_per_step=steps.per_step(launches),
        kernel_us_p50=float(np.median(durs[kernels])) if kernels.any() else None,
        memcpy_ms_per_step=_each_per_step(copies.ms, steps),
        memcpy_bytes_per_step=_each_per_step(copies.bytes, steps),
        pageable_htod_count_per_step=steps.per_step(float(copies.pageable_htod)),
        pageable_htod_frac=copies.pageable_htod_frac,
        tensor_core_kernel_frac=kernel_share(ev.code_mask(is_tensor_core_kernel)[names]),
        triton_kernels_per_step=steps.per_step(float(triton.sum())),
        comm_kernel_frac=kernel_share(ev.code_mask(is_comm_kernel)[names]),
        kernel_ms_per_step=steps.per_step(kernel_time / 1000.0),
    )


def _each_per_step(totals: dict[str, float], steps: Steps) -> dict[str, float]:
    return {k: v / steps.count for k, v in totals.items()} if steps.count else {}


def _launch_calls(ev: TraceEvents, steps: Steps) -> float | None:
    """cudaLaunch* / cuLaunch* (Triton) / cudaGraphLaunch calls issued inside the steps."""
    rt = ev.runtime
    if len(rt) == 0:
        return None
    calls = np.flatnonzero(ev.code_mask(is_launch_call)[rt.name])
    return float(steps.contains(rt.ts[calls]).sum())


def _copies(ev: TraceEvents, rows: np.ndarray, selected: np.ndarray) -> _Copies:
    """Copy time and bytes by kind (`Memcpy HtoD (Pageable -> Device)` -> "HtoD")."""
    gpu = ev.gpu
    ms: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    pageable = htod = 0
    pageable_bytes = htod_bytes = 0.0
    for i in np.flatnonzero(selected).tolist():
        label = ev.names[int(gpu.name[rows[i]])]
        parts = label.split()
        kind = parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else "other"
        size = float(gpu.col("bytes")[rows[i]])
        size = size if np.isfinite(size) else 0.0
        ms[kind] = ms.get(kind, 0.0) + float(gpu.dur[rows[i]]) / 1000.0
        nbytes[kind] = nbytes.get(kind, 0.0) + size
        if kind == "HtoD":
            htod += 1
            htod_bytes += size
            if "Pageable" in label:
                pageable += 1
                pageable_bytes += size
    if htod_bytes > 0:
        frac: float | None = pageable_bytes / htod_bytes
    else:
        frac = pageable / htod if htod else None
    return _Copies(ms, nbytes, pageable, frac)


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
