"""GPU facts of a parsed trace, on the GPU's own timeline: busy time, what the idle time
waited for, communication and its overlap with compute, the kernels that take the time.

GPU activity rows (kernel, gpu_memcpy, gpu_memset) sit on pid = device, tid = stream. Each is
linked to the CPU call that launched it (cudaLaunchKernel, cudaMemcpyAsync, cuLaunchKernel for
Triton, hipLaunchKernel on ROCm, cudaGraphLaunch for every kernel of a graph) by the
`correlation` id.

The window. The GPU runs behind the host: with CUDA graphs or without host syncs, the work
launched in the profiled steps finishes long after the host's ProfilerStep spans end, and
work launched before them is still running when they start. So the window is the GPU's own:
from the start of the profiled steps, or of the first GPU op launched inside them if that
runs earlier, to the end of the steps, or of the last such op if the GPU runs past them.
(HTA's temporal breakdown spans first to last kernel only, which calls a GPU that ran one
kernel in a 13 s step 100% busy.) Busy time is every op on the device inside that window,
whoever launched it.

The idle split, for each gap in the union of the device's ops (no stream busy):
* host wait: the op that ends the gap was launched (its launch call returned) after the gap
  began, so nothing was
  queued: the host (Python, the data pipeline, a sync) did not keep up (HTA's "host wait").
  When that op, once launched, still waited more than LAUNCH_GAP_MAX_US to start, only the
  time until its launch is host wait and the rest is a dependency wait (HTA counts the whole
  gap as host wait). A sync explains only part of it: the time the host sat blocked in the
  sync (the lead it had on the GPU, which removing the sync keeps) plus issuing the op that
  ends the gap; the rest is the host's other work (HTA has no sync share: its "host wait"
  covers the lot). After the last op, the time from the launching thread's last recorded
  event to the end of the steps is the trace's tail: the host recorded no work, launched
  nothing, and nothing in the trace says why (HTA's window ends at the last kernel). Before
  an op, the same holds for a stretch of at least HOST_QUIET_MIN_US in which no host thread
  records a CPU op, a runtime call, a Python frame or a user annotation (a record_function
  range, a DataLoader span; not a ProfilerStep): unrecorded too;
* launch gap: the op was already queued and the gap is at most LAUNCH_GAP_MAX_US: the
  per-kernel dispatch latency between back-to-back kernels, what fusion and CUDA graphs
  remove (HTA's "kernel wait", which uses a far smaller 30 ns cut-off);
* dependency wait: the op was queued long before yet did not start: it waited on an event,
  another device or a peer rank (an NCCL send/recv), or it was launched outside the trace
  (HTA's "other"). Fusion does nothing for it.
HTA splits the idle time of each stream separately and sums the streams; here the split is
of the device's idle time (no stream busy), so the three shares add up with busy to 1.

Only the device with the most GPU time is summarised (the training device; other devices
appear in a rank's trace only through peer copies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.comm_kernels import comm_kernel_mask
from perfdoctor.analyze.dataloading import DATALOADER_PREFIXES
from perfdoctor.analyze.kernels import (
    is_copy_call,
    is_launch_call,
    is_sync_call,
    is_tensor_core_kernel,
    is_triton_kernel,
)
from perfdoctor.analyze.trace_events import (
    ANNOTATION_PREFIXES,
    GPU_KIND_KERNEL,
    GPU_KIND_MEMCPY,
    GPU_KIND_MEMSET,
    TraceEvents,
)
from perfdoctor.analyze.trace_index import (
    STEP_NAME,
    Steps,
    launch_rows,
    rows_named,
    threads,
    union_by_thread,
)

# A queued op that starts at most this long after the previous one ended waited only for the
# GPU's own dispatch: 1-5 µs between back-to-back kernels on A100/H100 (CUDA graphs cut it to
# about 1 µs); a longer wait for queued work is a dependency, not launch overhead.
LAUNCH_GAP_MAX_US = 10.0
# A host-wait stretch this long in which no host thread records anything (no CPU op, no
# runtime call, no Python frame, no user annotation) is not the Python between two ops that
# fusion removes (tens of µs) but host time the trace does not show: 100 µs is where HTA's
# get_cuda_kernel_launch_stats calls a launch delay an outlier (launch_delay_cutoff=100).
HOST_QUIET_MIN_US = 100.0
# The host's cost of one kernel launch is the mean duration of the trace's kernel launch
# calls, leaving out the calls that blocked longer than HTA's runtime outlier cut-off
# (get_cuda_kernel_launch_stats runtime_cutoff=50 µs): lazy module loading, a full launch
# queue, first-call set-up, none of which fusion or CUDA graphs remove.
LAUNCH_CALL_OUTLIER_US = 50.0
_KERNEL_LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
)
TOP_KERNELS = 10


@dataclass(frozen=True)
class KernelShare:
    """One kernel name's GPU time in the window."""

    name: str
    count: int
    us_total: float
    share: float  # of the kernel time of the window's kernels
    comm: bool
    tensor_core: bool


@dataclass(frozen=True)
class GpuSummary:
    """busy + the three idle shares = 1; every *_frac is of the GPU window unless noted."""

    device: int
    window_us: float
    window_basis: str  # what defines the window, in words (the report shows it)
    gpu_tail_ms: float | None  # GPU work after the host's last profiled step ended
    busy_frac: float | None
    idle_host_wait_frac: float | None
    # The host wait, by what the launching thread did while the GPU sat idle (they add up to
    # idle_host_wait_frac with idle_host_unrecorded_frac): inside the DataLoader, blocked in a
    # sync that drained the queue, or anything else (Python, op dispatch, launches: the
    # launch-bound case).
    idle_host_data_frac: float | None
    idle_host_sync_frac: float | None
    idle_host_busy_frac: float | None
    # Part of the host wait too, with no cause in the trace: after the last op, the
    # launching thread recorded no more work until the steps ended (a trace that keeps
    # recording after the work), and before an op, stretches of at least HOST_QUIET_MIN_US
    # in which no host thread recorded anything.
    idle_host_unrecorded_frac: float | None
    idle_launch_gap_frac: float | None
    idle_dependency_wait_frac: float | None
    compute_frac: float | None  # union of non-communication kernels (HTA "compute")
    comm_frac: float | None  # union of communication kernels
    comm_exposed_frac: float | None  # communication with no compute kernel beside it
    comm_overlap_frac: float | None  # of the communication time, the share under compute
    kernels_per_step: float | None
    kernel_launches_per_step: float | None
    kernel_us_p50: float | None
    kernel_count: int  # kernels launched in the profiled steps (the window's kernels)
    launch_count: int | None  # launch calls issued in the profiled steps
    # Mean duration of the trace's kernel launch calls (cudaLaunchKernel, cuLaunchKernel,
    # hip*LaunchKernel) up to LAUNCH_CALL_OUTLIER_US: the host's cost of one launch; None
    # when the trace has none.
    launch_call_us_mean: float | None
    # The union, over the host threads, of the outermost CPU ops that issue GPU work (a
    # launch, copy or memset call inside them), clipped to the window: the host path of each
    # launch (Python's op, its dispatch and own CPU work, the runtime call), what CUDA graphs
    # remove at most. None when no such call runs inside a CPU op.
    launch_ops_host_frac: float | None
    memcpy_count: int
    memset_count: int
    unlaunched_count: int  # ops on the device with no launch record in the trace
    streams: int
    memcpy_ms_per_step: dict[str, float]  # "HtoD" / "DtoH" / "DtoD" / ... -> ms per step
    memcpy_bytes_per_step: dict[str, float]
    memcpy_count_by_kind: dict[str, int]
    pageable_htod_count_per_step: float | None
    pageable_htod_frac: float | None  # by bytes (by count when bytes are missing)
    tensor_core_kernel_frac: float | None
    triton_kernels_per_step: float | None
    comm_kernel_frac: float | None  # of kernel time
    kernel_ms_per_step: float | None
    top_kernels: tuple[KernelShare, ...] = ()


@dataclass(frozen=True)
class _Copies:
    ms: dict[str, float]
    bytes: dict[str, float]
    counts: dict[str, int]
    pageable_htod: int
    pageable_htod_frac: float | None


@dataclass(frozen=True)
class _Idle:
    host_wait: float
    host_data: float
    host_sync: float
    host_unrecorded: float
    launch_gap: float
    dependency: float


def summarize_gpu(
    ev: TraceEvents, steps: Steps, *, launched_only: bool = False, hta_window: bool = False
) -> GpuSummary | None:
    """`launched_only` leaves out the ops whose launch is not in the trace, and `hta_window`
    spans the window from the first to the last op only, as HTA does (benchmarks/oracle.py
    uses both to check the arithmetic on HTA's own selection); by default ops without a
    launch record count as busy time, because the GPU ran them, and the window also covers
    the profiled steps, because a GPU idle at their start or end is idle all the same."""
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    devices = gpu.col("device")
    busiest = max(np.unique(devices).tolist(), key=lambda d: float(gpu.dur[devices == d].sum()))
    rows = np.flatnonzero(devices == busiest)
    rows = rows[np.argsort(gpu.ts[rows], kind="stable")]
    if launched_only:
        rows = rows[launch_rows(ev, rows) >= 0]
        if rows.size == 0:
            return None
    starts, ends, durs = gpu.ts[rows], gpu.end[rows], gpu.dur[rows]
    launch = launch_rows(ev, rows)
    has_launch = launch >= 0
    launch_ts = np.full(rows.size, np.nan)
    if has_launch.any():
        # When the launch call returned: only then is the op queued. A launch call can block
        # for milliseconds (lazy module loading on ROCm/CUDA, a full launch queue); that time
        # is the host's, not a dependency the queued op waited on.
        launch_ts[has_launch] = ev.runtime.end[launch[has_launch]]
    issued_ts = np.full(rows.size, np.nan)  # when the call began: which step launched the op
    if has_launch.any():
        issued_ts[has_launch] = ev.runtime.ts[launch[has_launch]]

    selected, basis = _window_ops(steps, starts, has_launch, issued_ts)
    if not selected.any():
        return None
    lo, hi = float(starts[selected].min()), float(ends[selected].max())
    if steps.count and not hta_window:
        lo, hi = min(lo, float(steps.lo[0])), max(hi, float(steps.hi[-1]))
    window = hi - lo
    us, ue = intervals.clip(*intervals.union(starts, ends), np.array([lo]), np.array([hi]))
    busy = intervals.total(us, ue)
    idle = _idle_split(
        us, ue, starts, launch_ts, issued_ts, _HostActivity.of(ev, launch, lo, hi), lo, hi
    )

    names = gpu.name[rows]
    kind = gpu.col("kind")[rows]
    is_kernel = kind == GPU_KIND_KERNEL
    kernels = is_kernel & selected
    kernel_time = float(durs[kernels].sum())
    comm_names = comm_kernel_mask(ev, rows)
    comm_s, comm_e = _union_in(starts, ends, is_kernel & comm_names, lo, hi)
    comp_s, comp_e = _union_in(starts, ends, is_kernel & ~comm_names, lo, hi)
    comm_time = intervals.total(comm_s, comm_e)
    overlap = intervals.total(*intervals.clip(comm_s, comm_e, comp_s, comp_e))

    driver_launch = np.zeros(rows.size, dtype=bool)
    if len(ev.runtime):
        driver_launch[has_launch] = ev.runtime.col("driver")[launch[has_launch]]

    def frac(value: float) -> float | None:
        return value / window if window > 0 else None

    def kernel_share(flags: np.ndarray) -> float | None:
        return float(durs[flags & kernels].sum()) / kernel_time if kernel_time > 0 else None

    triton = (ev.code_mask(is_triton_kernel)[names] | driver_launch) & kernels
    copies = _copies(ev, rows, (kind == GPU_KIND_MEMCPY) & selected)
    launches = _launch_calls(ev, steps)
    launching = _launching_ops_time(ev, lo, hi)
    return GpuSummary(
        device=int(busiest),
        window_us=window,
        window_basis=basis,
        gpu_tail_ms=(hi - float(steps.hi[-1])) / 1000.0 if steps.count else None,
        busy_frac=frac(busy),
        idle_host_wait_frac=frac(idle.host_wait),
        idle_host_data_frac=frac(idle.host_data),
        idle_host_sync_frac=frac(idle.host_sync),
        idle_host_busy_frac=frac(
            idle.host_wait - idle.host_data - idle.host_sync - idle.host_unrecorded
        ),
        idle_host_unrecorded_frac=frac(idle.host_unrecorded),
        idle_launch_gap_frac=frac(idle.launch_gap),
        idle_dependency_wait_frac=frac(idle.dependency),
        compute_frac=frac(intervals.total(comp_s, comp_e)),
        comm_frac=frac(comm_time),
        comm_exposed_frac=frac(comm_time - overlap),
        comm_overlap_frac=overlap / comm_time if comm_time > 0 else None,
        kernels_per_step=steps.per_step(float(kernels.sum())),
        kernel_launches_per_step=steps.per_step(launches),
        kernel_us_p50=float(np.median(durs[kernels])) if kernels.any() else None,
        kernel_count=int(kernels.sum()),
        launch_count=None if launches is None else int(launches),
        launch_call_us_mean=_launch_call_us_mean(ev),
        launch_ops_host_frac=None if launching is None else frac(launching),
        memcpy_count=int(((kind == GPU_KIND_MEMCPY) & selected).sum()),
        memset_count=int(((kind == GPU_KIND_MEMSET) & selected).sum()),
        unlaunched_count=int((~has_launch).sum()),
        streams=int(np.unique(gpu.col("stream")[rows]).size),
        memcpy_ms_per_step=_each_per_step(copies.ms, steps),
        memcpy_bytes_per_step=_each_per_step(copies.bytes, steps),
        memcpy_count_by_kind=copies.counts,
        pageable_htod_count_per_step=steps.per_step(float(copies.pageable_htod)),
        pageable_htod_frac=copies.pageable_htod_frac,
        tensor_core_kernel_frac=kernel_share(ev.code_mask(is_tensor_core_kernel)[names]),
        triton_kernels_per_step=steps.per_step(float(triton.sum())),
        comm_kernel_frac=kernel_share(comm_names),
        kernel_ms_per_step=steps.per_step(kernel_time / 1000.0),
        top_kernels=_top_kernels(
            ev, names[kernels], durs[kernels], comm_names[kernels], kernel_time
        ),
    )


def _window_ops(
    steps: Steps, starts: np.ndarray, has_launch: np.ndarray, launch_ts: np.ndarray
) -> tuple[np.ndarray, str]:
    """The ops that define the GPU window, and how they were chosen."""
    if not steps.count:
        return np.ones(
            starts.size, dtype=bool
        ), "first to last GPU op (the trace has no ProfilerStep)"
    if has_launch.any():
        in_steps = has_launch & steps.contains(np.where(has_launch, launch_ts, -np.inf))
        if in_steps.any():
            return (
                in_steps,
                "the profiled steps, and the GPU ops launched in them where they run past",
            )
    # No launch records (a trace without runtime events): ops that start inside the steps.
    return steps.contains(starts), "GPU ops starting in the profiled steps (no launch records)"


def _union_in(
    starts: np.ndarray, ends: np.ndarray, flags: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    us, ue = intervals.union(starts[flags], ends[flags])
    return intervals.clip(us, ue, np.array([lo]), np.array([hi]))


def _top_kernels(
    ev: TraceEvents, names: np.ndarray, durs: np.ndarray, comm: np.ndarray, kernel_time: float
) -> tuple[KernelShare, ...]:
    if names.size == 0 or kernel_time <= 0:
        return ()
    codes, inverse = np.unique(names, return_inverse=True)
    totals = np.bincount(inverse, weights=durs)
    counts = np.bincount(inverse)
    # A name is communication when any of its launches was (by name or by host span).
    comm_counts = np.bincount(inverse, weights=comm.astype(float))
    order = np.argsort(-totals, kind="stable")[:TOP_KERNELS]
    out = []
    for i in order.tolist():
        name = ev.names[int(codes[i])]
        out.append(
            KernelShare(
                name=name,
                count=int(counts[i]),
                us_total=float(totals[i]),
                share=float(totals[i]) / kernel_time,
                comm=bool(comm_counts[i] > 0),
                tensor_core=is_tensor_core_kernel(name),
            )
        )
    return tuple(out)


def _each_per_step(totals: dict[str, float], steps: Steps) -> dict[str, float]:
    return {k: v / steps.count for k, v in totals.items()} if steps.count else {}


def _launch_calls(ev: TraceEvents, steps: Steps) -> float | None:
    """Launch calls (cudaLaunch*, cuLaunch* for Triton, cudaGraphLaunch, hip*Launch*) issued
    inside the steps."""
    rt = ev.runtime
    if len(rt) == 0:
        return None
    calls = np.flatnonzero(ev.code_mask(is_launch_call)[rt.name])
    return float(steps.contains(rt.ts[calls]).sum())


def _launch_call_us_mean(ev: TraceEvents) -> float | None:
    rt = ev.runtime
    if len(rt) == 0:
        return None
    calls = rows_named(rt, ev.code_mask(lambda n: n.startswith(_KERNEL_LAUNCH_CALLS)))
    durs = rt.dur[calls]
    durs = durs[durs <= LAUNCH_CALL_OUTLIER_US]
    return float(durs.mean()) if durs.size else None


def _launching_ops_time(ev: TraceEvents, lo: float, hi: float) -> float | None:
    """The host time of the ops that issue GPU work inside the window [lo, hi]: per host
    thread, the outermost CPU ops (not the ProfilerStep or other record_function spans a
    writer filed as ops) that contain a launch, copy or memset call, less what inside them
    CUDA graphs do not remove: syncs, runtime and driver calls over LAUNCH_CALL_OUTLIER_US
    (allocations, frees, module loading, cuDNN set-up, blocking copies) and nested ops over
    it that launch nothing (a first allocation, CPU-side set-up); their union over all
    threads (two threads launching at once is one stretch of wall time), clipped to the
    window. A call outside any op counts its own duration. None when no call is inside an
    op: the trace then says nothing of the host path of a launch.

    One sort of the ops and of the calls, then per thread a running maximum, a binary search
    and one sweep: O(n log n) in the trace's events."""
    rt, ops = ev.runtime, ev.cpu_ops
    if len(rt) == 0 or len(ops) == 0:
        return None
    issuing = ev.code_mask(lambda n: is_launch_call(n) or is_copy_call(n))[rt.name]
    calls = np.flatnonzero(issuing)
    if calls.size == 0:
        return None
    waits = (rt.dur > LAUNCH_CALL_OUTLIER_US) | ev.code_mask(is_sync_call)[rt.name]
    cuts = _grouped(rt.tid[waits], rt.ts[waits], rt.end[waits])
    is_span = ev.code_mask(
        lambda n: STEP_NAME.match(n) is not None or n.startswith(ANNOTATION_PREFIXES)
    )
    op_rows = np.flatnonzero(~is_span[ops.name])
    by_thread = _grouped(ops.tid[op_rows], ops.ts[op_rows], ops.end[op_rows])
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    contained = 0
    for tid, (call_ts, call_end) in _grouped(rt.tid[calls], rt.ts[calls], rt.end[calls]).items():
        inside = np.zeros(call_ts.size, dtype=bool)
        host_s, host_e = np.empty(0), np.empty(0)
        cut_s, cut_e = cuts.get(tid, (np.empty(0), np.empty(0)))
        if tid in by_thread:
            op_ts, op_end = by_thread[tid]
            # Sorted by start, the longer first on a tie: an op is outermost when it starts
            # at or after the end of every op before it; the ops up to the next outermost one
            # nest inside it (one that overhangs its end, through rounding, extends it).
            reach = np.maximum.accumulate(op_end)
            outer = np.flatnonzero(np.r_[True, op_ts[1:] >= reach[:-1]])
            outer_ts, outer_end = op_ts[outer], np.maximum.reduceat(op_end, outer)
            pos = np.asarray(np.searchsorted(outer_ts, call_ts, side="right")) - 1
            inside = (pos >= 0) & (call_ts < outer_end[np.maximum(pos, 0)])
            used = np.unique(pos[inside])
            host_s, host_e = outer_ts[used], outer_end[used]
            contained += int(inside.sum())
            # A nested op over LAUNCH_CALL_OUTLIER_US with no launch inside it (a first
            # allocation, CPU-side set-up) is not the host path of a launch either.
            launches_in = np.searchsorted(call_ts, op_end) - np.searchsorted(call_ts, op_ts)
            idle = (launches_in == 0) & (op_end - op_ts > LAUNCH_CALL_OUTLIER_US)
            cut_s = np.r_[cut_s, op_ts[idle]]
            cut_e = np.r_[cut_e, op_end[idle]]
        host_s, host_e = np.r_[host_s, call_ts[~inside]], np.r_[host_e, call_end[~inside]]
        host_s, host_e = intervals.subtract(host_s, host_e, cut_s, cut_e)
        starts.append(host_s)
        ends.append(host_e)
    if not contained:
        return None
    us, ue = intervals.union(np.concatenate(starts), np.concatenate(ends))
    return intervals.total(*intervals.clip(us, ue, np.array([lo]), np.array([hi])))


def _grouped(
    tids: np.ndarray, ts: np.ndarray, end: np.ndarray
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread, (starts, ends) sorted by start, the longer span first on a tie."""
    order = np.lexsort((-end, ts, tids))
    tids, ts, end = tids[order], ts[order], end[order]
    uniq, first = np.unique(tids, return_index=True)
    bounds = np.r_[first, tids.size]
    return {
        int(t): (ts[bounds[i] : bounds[i + 1]], end[bounds[i] : bounds[i + 1]])
        for i, t in enumerate(uniq.tolist())
    }


def _copies(ev: TraceEvents, rows: np.ndarray, selected: np.ndarray) -> _Copies:
    """Copy time, bytes and count by kind (`Memcpy HtoD (Pageable -> Device)` -> "HtoD").
    Summed per name with bincount; only the few distinct copy names are read as strings."""
    gpu = ev.gpu
    chosen = rows[selected]
    codes, where = np.unique(gpu.name[chosen], return_inverse=True)
    sizes = gpu.col("bytes")[chosen]
    sizes = np.where(np.isfinite(sizes), sizes, 0.0)
    per_ms = np.bincount(where, weights=gpu.dur[chosen], minlength=codes.size) / 1000.0
    per_bytes = np.bincount(where, weights=sizes, minlength=codes.size)
    per_count = np.bincount(where, minlength=codes.size)
    ms: dict[str, float] = {}
    nbytes: dict[str, float] = {}
    counts: dict[str, int] = {}
    pageable = htod = 0
    pageable_bytes = htod_bytes = 0.0
    for code, t, b, n in zip(
        codes.tolist(), per_ms.tolist(), per_bytes.tolist(), per_count.tolist(), strict=True
    ):
        label = ev.names[code]
        parts = label.split()
        kind = parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else "other"
        ms[kind] = ms.get(kind, 0.0) + t
        nbytes[kind] = nbytes.get(kind, 0.0) + b
        counts[kind] = counts.get(kind, 0) + n
        if kind == "HtoD":
            htod += n
            htod_bytes += b
            if "Pageable" in label:
                pageable += n
                pageable_bytes += b
    if htod_bytes > 0:
        frac: float | None = pageable_bytes / htod_bytes
    else:
        frac = pageable / htod if htod else None
    return _Copies(ms, nbytes, counts, pageable, frac)


@dataclass(frozen=True)
class _HostActivity:
    """What the host threads that launch GPU work were doing: per launch row, its thread;
    per thread, the DataLoader spans (a union), its sync calls (end times, sorted, and the
    running total of their durations) and the end of its last recorded event; over all
    host threads, the long stretches in which none of them recorded anything."""

    launch_thread: np.ndarray  # per GPU row of the device: the launching thread, -1 if none
    data: dict[int, tuple[np.ndarray, np.ndarray]]
    syncs: dict[int, tuple[np.ndarray, np.ndarray]]  # tid -> (ends, cumulative durations)
    last_end: dict[int, float]  # tid -> end of its last op, call or annotation (not a step)
    any_last_end: float  # the same over every host thread (-inf when none)
    # The same over the threads that run the ProfilerStep spans (the training loop's), which
    # may launch nothing after an autograd thread launched the step's last kernel.
    step_last_end: float
    # Stretches of at least HOST_QUIET_MIN_US with no CPU op, runtime call, Python frame or
    # user annotation on any host thread (sorted, disjoint; unbounded at either end).
    quiet: tuple[np.ndarray, np.ndarray]  # inside the GPU window only

    @classmethod
    def of(cls, ev: TraceEvents, launch: np.ndarray, lo: float, hi: float) -> _HostActivity:
        rt = ev.runtime
        thread = np.full(launch.size, -1, dtype=np.int64)
        if len(rt) and (launch >= 0).any():
            thread[launch >= 0] = rt.tid[launch[launch >= 0]]
        is_data = ev.code_mask(lambda n: n.startswith(DATALOADER_PREFIXES))
        data = union_by_thread(
            [(table, rows_named(table, is_data)) for table in (ev.annotations, ev.cpu_ops)]
        )
        syncs = {}
        for tid, rows in threads(rt, rows_named(rt, ev.code_mask(is_sync_call))).items():
            order = np.argsort(rt.end[rows], kind="stable")
            syncs[tid] = (rt.end[rows][order], np.r_[0.0, np.cumsum(rt.dur[rows][order])])
        last_end, step_threads = _last_host_event(ev)
        any_last_end = max(last_end.values(), default=-np.inf)
        step_last_end = max((last_end.get(t, -np.inf) for t in step_threads), default=-np.inf)
        quiet = _quiet_stretches(ev, lo, hi)
        return cls(thread, data, syncs, last_end, any_last_end, step_last_end, quiet)

    def quiet_time(self, since: np.ndarray, until: np.ndarray) -> np.ndarray:
        """Per [since, until], the time inside the long stretches with nothing recorded."""
        qs, qe = self.quiet
        if qs.size == 0:
            return np.zeros(since.size)
        # Quiet time up to t: the whole stretches that end before t, and the part of the one
        # t falls in. Stretches are disjoint and sorted, so one cumulative sum serves all.
        lengths = qe - qs
        before = np.r_[0.0, np.cumsum(lengths)]

        def upto(t: np.ndarray) -> np.ndarray:
            i = np.asarray(np.searchsorted(qs, t, side="right"))
            last = np.maximum(i - 1, 0)
            inside = np.clip(t - qs[last], 0.0, lengths[last])
            return np.where(i > 0, before[last] + inside, 0.0)

        return np.clip(upto(until) - upto(since), 0.0, None)

    def quiet_from(self, op: np.ndarray) -> np.ndarray:
        """When the host stopped recording work: the last event of the thread that
        launched each op (of any thread when the op has no launch record), or of the thread
        that runs the steps if that is later."""
        last = [
            self.last_end.get(tid, self.any_last_end) if tid >= 0 else self.any_last_end
            for tid in self.launch_thread[op].tolist()
        ]
        return np.maximum(np.array(last, dtype=float), self.step_last_end)

    def classify(
        self, op: np.ndarray, since: np.ndarray, until: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For host-wait gaps: (in the DataLoader, the time of it in the DataLoader, time
        blocked in syncs). `op` is the GPU row that ended the gap, [since, until] the time
        from the GPU going idle to the launch of that op: data when the DataLoader covers at
        least half of it on the launching thread, and only the covered time counts as data
        (the whole gap did, so the GPU's idle "input data" came out above the DataLoader's
        own time: 11.2% of a DLRM rank's window against 9.2% of its step); otherwise the
        summed duration of the launching thread's sync calls that returned inside it (0 when
        none): how far ahead of the GPU the host was before the sync made it wait, the most
        of the gap that removing the sync can hide."""
        data = np.zeros(op.size, dtype=bool)
        data_us = np.zeros(op.size)
        blocked = np.zeros(op.size)
        thread = self.launch_thread[op]
        for tid in np.unique(thread).tolist():
            sel = np.flatnonzero(thread == tid)
            if tid in self.data:
                lo, hi = self.data[tid]
                for i in sel.tolist():
                    covered = intervals.total(
                        *intervals.clip(lo, hi, since[i : i + 1], until[i : i + 1])
                    )
                    data[i] = covered >= 0.5 * (until[i] - since[i])
                    data_us[i] = covered if data[i] else 0.0
            if tid in self.syncs:
                ends, cumulative = self.syncs[tid]
                first = np.searchsorted(ends, since[sel], side="left")
                last = np.searchsorted(ends, until[sel], side="right")
                blocked[sel] = cumulative[last] - cumulative[first]
        return data, data_us, np.where(data, 0.0, blocked)


def _quiet_stretches(ev: TraceEvents, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The complement, on every host thread at once, of what the host recorded doing: CPU
    ops and user annotations (record_function ranges, "## backward ##", DataLoader spans;
    not the ProfilerStep spans, which last the step whatever the host did in it), runtime
    and driver calls, Python frames: what the trace's tail counts as recorded host work too
    (_last_host_event). Only stretches of at least HOST_QUIET_MIN_US are kept (judged by
    their whole length), clipped to the window [lo, hi]."""
    is_step = ev.code_mask(lambda n: STEP_NAME.match(n) is not None)
    spans = (ev.cpu_ops, ev.annotations)
    starts = [t.ts[~is_step[t.name]] for t in spans] + [ev.runtime.ts, ev.python.ts]
    ends = [t.end[~is_step[t.name]] for t in spans] + [ev.runtime.end, ev.python.end]
    hs, he = intervals.union(np.concatenate(starts), np.concatenate(ends))
    qs, qe = np.r_[-np.inf, he], np.r_[hs, np.inf]
    keep = qe - qs >= HOST_QUIET_MIN_US
    qs, qe = np.clip(qs[keep], lo, hi), np.clip(qe[keep], lo, hi)
    inside = qe > qs
    return qs[inside], qe[inside]


def _last_host_event(ev: TraceEvents) -> tuple[dict[int, float], set[int]]:
    """Per host thread, the end of its last recorded event (ops, runtime calls, Python
    frames, annotations), leaving out the ProfilerStep spans, which last as long as the step
    whatever the host did in it; and the threads that run those spans."""
    is_step = ev.code_mask(lambda n: STEP_NAME.match(n) is not None)
    step_threads = {
        int(t) for table in (ev.annotations, ev.cpu_ops) for t in table.tid[is_step[table.name]]
    }
    tables = [(t, np.flatnonzero(~is_step[t.name])) for t in (ev.cpu_ops, ev.annotations)]
    tables += [(t, np.arange(len(t))) for t in (ev.runtime, ev.python)]
    tids = np.concatenate([t.tid[r] for t, r in tables])
    ends = np.concatenate([t.end[r] for t, r in tables])
    if tids.size == 0:
        return {}, step_threads
    order = np.argsort(tids, kind="stable")
    uniq, first = np.unique(tids[order], return_index=True)
    last = np.maximum.reduceat(ends[order], first)
    return dict(zip(uniq.tolist(), last.tolist(), strict=True)), step_threads


def _idle_split(
    us: np.ndarray,
    ue: np.ndarray,
    starts: np.ndarray,
    launch_ts: np.ndarray,
    issued_ts: np.ndarray,
    host: _HostActivity,
    lo: float,
    hi: float,
) -> _Idle:
    """The window's idle time (no op running between `lo` and `hi`), by what it waited for.

    `us`/`ue` are the busy intervals inside the window. The op that ends a gap starts at the
    gap's end; ops are sorted by start, so it is the first one starting there (several ops
    may start at the same time on different streams: the earliest launched of them decides).
    The gap after the last op, up to the end of the steps, ends with no op: nothing was
    queued, so it is host wait, judged by what the last op's launching thread did, as far as
    the trace recorded it: from that thread's last event on, it is the unrecorded tail. In
    the other host-wait gaps, the time in long stretches with nothing recorded on any host
    thread is unrecorded too.
    """
    if us.size == 0:
        return _Idle(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    gap_start, gap_end = np.r_[lo, ue], np.r_[us, hi]
    keep = gap_end > gap_start
    trailing = np.zeros(gap_start.size, dtype=bool)
    trailing[-1] = True
    gap_start, gap_end, trailing = gap_start[keep], gap_end[keep], trailing[keep]
    gaps = gap_end - gap_start
    # asarray: numpy's stubs type searchsorted of an untyped array as a scalar.
    first = np.asarray(np.searchsorted(starts, gap_end, side="left"))
    last = np.asarray(np.searchsorted(starts, gap_end, side="right"))
    op: np.ndarray = np.minimum(first, starts.size - 1)
    launched = launch_ts[op]
    # Several ops starting exactly at the gap's end (rare): the earliest launch decides.
    for k in np.flatnonzero((last - first > 1) & ~trailing).tolist():
        group = launch_ts[first[k] : last[k]]
        if np.isfinite(group).any():
            op[k] = first[k] + int(np.nanargmin(group))
            launched[k] = launch_ts[op[k]]
    op[trailing] = starts.size - 1
    launched[trailing] = np.inf  # no op ends it: nothing was ever queued
    known = ~np.isnan(launched)
    # Nothing was queued from the gap's start until the launch: that part is host wait. What
    # follows the launch is the op's own start latency, unless the queued op then waited much
    # longer (an event, a peer): that remainder is a dependency wait.
    host_part = np.where(known, np.clip(launched - gap_start, 0.0, gaps), 0.0)
    queued = gaps - host_part
    waited = host_part > 0
    late = waited & (queued > LAUNCH_GAP_MAX_US)
    host_time = np.where(late, host_part, np.where(waited, gaps, 0.0))
    short = known & ~waited & (gaps <= LAUNCH_GAP_MAX_US)
    dependency_time = np.where(late, queued, np.where(~waited & ~short, gaps, 0.0))
    # The tail: once the last recorded events of the launching thread and of the thread
    # running the steps have ended, the trace shows the host doing nothing and launching
    # nothing until the steps end. Nothing there points
    # at a cause a fix could remove (no launch overhead, no sync, no data wait).
    unrecorded = np.zeros(gaps.size)
    if trailing.any():
        quiet = host.quiet_from(op[trailing])
        unrecorded[trailing] = np.clip(
            gap_end[trailing] - np.maximum(gap_start[trailing], quiet), 0.0, gaps[trailing]
        )
    # Before an op, the same holds inside the long stretches in which no host thread recorded
    # anything: the host's time there is not shown, so no cause is either.
    before_op = waited & ~trailing
    unrecorded[before_op] = np.minimum(
        host.quiet_time(gap_start[before_op], (gap_start + host_time)[before_op]),
        host_time[before_op],
    )
    recorded = host_time - unrecorded
    rows = np.flatnonzero(waited)
    # The tail's recorded part is its start, up to the host's last event; before an op the
    # host wait lasts to the launch, whatever the trace missed inside it.
    host_end = gap_start + np.where(trailing, recorded, host_time)
    data, data_us, blocked = host.classify(
        op[rows], gap_start[rows], np.minimum(launched, host_end)[rows]
    )
    # A sync hides at most the lead the host lost while blocked in it, and the issuing of the
    # op that ends the gap (its launch call and dispatch) which follows any sync; the host's
    # other work in the gap (Python, dispatch of other ops) is its own.
    issued = np.where(trailing, host_end, np.maximum(issued_ts[op], gap_start))
    issuing = np.clip(host_end - issued, 0.0, recorded)[rows]
    sync_time = np.where(blocked > 0, np.minimum(recorded[rows], blocked + issuing), 0.0)
    return _Idle(
        host_wait=float(host_time.sum()),
        host_data=float(np.minimum(recorded[rows], data_us)[data].sum()),
        host_sync=float(sync_time.sum()),
        host_unrecorded=float(unrecorded.sum()),
        launch_gap=float(gaps[short].sum()),
        dependency=float(dependency_time.sum()),
    )
