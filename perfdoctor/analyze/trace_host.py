"""Host-side (CPU) facts of a parsed trace: steps, syncs, op mix, optimizer, data loading.

All functions take the compact arrays of `trace_events.TraceEvents`; the per-event work is
numpy, and Python loops only run over small sets (sync points, threads, distinct names).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.frames import UserCode, parse_frame_name
from perfdoctor.analyze.pytree import PyTree, innermost_at, nearest_flagged
from perfdoctor.analyze.trace_events import Table, TraceEvents
from perfdoctor.model import SourceLocation

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_PREFIXES = ("enumerate(DataLoader)#", "enumerate(DataPipe)#")

# `.item()` is aten::item -> aten::_local_scalar_dense; the inner op is the actual sync, so
# only it is counted (aten::item alone is counted for traces that lack the inner op).
SYNC_OPS = frozenset({"aten::_local_scalar_dense"})
SYNC_OPS_FALLBACK = frozenset({"aten::item"})
SYNC_RUNTIME = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",  # the blocking variant; cudaMemcpyAsync is not a sync by itself
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
    }
)

CONV_OPS = frozenset(
    {
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::convolution",
        "aten::_convolution",
        "aten::convolution_backward",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::mkldnn_convolution",
        "aten::miopen_convolution",
        "aten::_slow_conv2d_forward",
        "aten::_slow_conv2d_backward",
        "aten::slow_conv3d_forward",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::_nnpack_spatial_convolution",
    }
)
MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_addmm_activation",
        "aten::addmv",
        "aten::mv",
        "aten::_scaled_mm",
        "aten::_int_mm",
    }
)
# TorchTidy's MatMulDimInFP16Pattern checks these three; baddbmm is the same GEMM shape.
ALIGNMENT_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"})
LOW_PRECISION = frozenset(
    {"c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2", "half", "bfloat16"}
)
FLOAT_TYPES = LOW_PRECISION | {"float", "double"}

COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms", "ncclDevKernel")
FACTORY_OPS = frozenset(
    {
        "aten::zeros",
        "aten::ones",
        "aten::full",
        "aten::empty",
        "aten::randn",
        "aten::rand",
        "aten::randint",
        "aten::randperm",
        "aten::arange",
        "aten::linspace",
        "aten::eye",
        "aten::lift_fresh",  # torch.tensor(...)
        "aten::scalar_tensor",
        "aten::normal_",
        "aten::uniform_",
        "aten::fill_",
        "aten::zero_",
    }
)
COPY_TO_DEVICE_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::cuda"})
ZERO_OPS = frozenset({"aten::zero_", "aten::_foreach_zero_"})
# Per-parameter arithmetic that a single-tensor optimizer issues in a Python loop.
_PER_PARAM_OPS = ("aten::add_", "aten::mul_", "aten::addcmul_", "aten::addcdiv_", "aten::lerp_")


@dataclass(frozen=True)
class Steps:
    """ProfilerStep spans of the trace, sorted, as disjoint windows."""

    numbers: tuple[int, ...]
    starts: np.ndarray
    ends: np.ndarray
    lo: np.ndarray  # union of the spans (steps may touch)
    hi: np.ndarray

    @property
    def count(self) -> int:
        return len(self.numbers)

    @property
    def total_us(self) -> float:
        return intervals.total(self.lo, self.hi)

    def durations_ms(self) -> np.ndarray:
        return (self.ends - self.starts) / 1000.0

    def contains(self, points: np.ndarray) -> np.ndarray:
        return intervals.point_in(points, self.lo, self.hi)


def find_steps(ev: TraceEvents) -> Steps:
    ann = ev.annotations
    rows: list[int] = []
    numbers: list[int] = []
    for code in ev.name_codes(lambda n: STEP_NAME.match(n) is not None).tolist():
        for row in np.flatnonzero(ann.name == code).tolist():
            rows.append(row)
            numbers.append(int(STEP_NAME.match(ev.names[code]).group(1)))  # type: ignore[union-attr]
    if not rows:
        empty = np.empty(0)
        return Steps((), empty, empty, empty, empty)
    idx = np.array(rows)
    order = np.argsort(ann.ts[idx], kind="stable")
    idx = idx[order]
    starts = ann.ts[idx]
    ends = starts + ann.dur[idx]
    lo, hi = intervals.union(starts, ends)
    return Steps(tuple(numbers[i] for i in order.tolist()), starts, ends, lo, hi)


def per_step(value: float, steps: Steps) -> float | None:
    return value / steps.count if steps.count else None


def _rows_named(table: Table, mask: np.ndarray) -> np.ndarray:
    return np.flatnonzero(mask[table.name]) if len(table) else np.empty(0, dtype=np.int64)


def _threads(table: Table, rows: np.ndarray) -> dict[int, np.ndarray]:
    """Rows grouped by thread, each group sorted by start time."""
    out: dict[int, np.ndarray] = {}
    if rows.size == 0:
        return out
    tids = table.tid[rows]
    for tid in np.unique(tids).tolist():
        sel = rows[tids == tid]
        out[int(tid)] = sel[np.argsort(table.ts[sel], kind="stable")]
    return out


def _inside_spans(table: Table, rows: np.ndarray, spans: Table, span_rows: np.ndarray) -> np.ndarray:
    """Which of `rows` start inside one of the spans on their own thread."""
    inside = np.zeros(rows.size, dtype=bool)
    if rows.size == 0 or span_rows.size == 0:
        return inside
    by_thread = _threads(spans, span_rows)
    tids = table.tid[rows]
    for tid, srows in by_thread.items():
        lo, hi = intervals.union(spans.ts[srows], spans.end[srows])
        sel = tids == tid
        inside[sel] = intervals.point_in(table.ts[rows[sel]], lo, hi)
    return inside


# --------------------------------------------------------------------------- host syncs


@dataclass(frozen=True)
class SyncStats:
    count: int | None  # None on a CPU-only trace: nothing there waits for a device
    blocked_us: float | None
    locations: tuple[SourceLocation, ...]


def host_syncs(
    ev: TraceEvents, steps: Steps, tree: PyTree | None, user: UserCode, top: int = 5
) -> SyncStats:
    """Points where the host waited for the GPU, and the user's functions that caused them.

    A scalar read (`.item()` -> aten::_local_scalar_dense) is a sync only when the tensor is
    on the device, which the trace shows as a copy + synchronize runtime call inside the op;
    reads of CPU tensors (e.g. the optimizer's CPU step counters) are not counted. Runtime
    syncs outside any such op (torch.cuda.synchronize(), blocking cudaMemcpy) count alone.
    """
    rt = ev.runtime
    if len(rt) == 0 and len(ev.gpu) == 0:
        return SyncStats(None, None, ())
    ops = ev.cpu_ops
    op_rows = _rows_named(ops, ev.code_mask(lambda n: n in SYNC_OPS))
    if op_rows.size == 0:
        op_rows = _rows_named(ops, ev.code_mask(lambda n: n in SYNC_OPS_FALLBACK))
    rt_sync = _rows_named(rt, ev.code_mask(lambda n: n in SYNC_RUNTIME))
    rt_copy = _rows_named(
        rt, ev.code_mask(lambda n: n in SYNC_RUNTIME or n.startswith(("cudaMemcpy", "cuMemcpy")))
    )
    op_rows = op_rows[_contains_any(ops, op_rows, rt, rt_copy)]
    # The cudaStreamSynchronize under a counted _local_scalar_dense is the same sync point.
    if rt_sync.size and op_rows.size:
        rt_sync = rt_sync[~_inside_spans(rt, rt_sync, ops, op_rows)]
    points: list[tuple[int, float, float]] = []  # (thread, time, blocked duration)
    for table, rows in ((ops, op_rows), (rt, rt_sync)):
        if rows.size == 0:
            continue
        keep = rows[steps.contains(table.ts[rows])] if steps.count else rows
        points.extend(
            zip(table.tid[keep].tolist(), table.ts[keep].tolist(), table.dur[keep].tolist())
        )
    blocked = float(sum(p[2] for p in points))
    locations: tuple[SourceLocation, ...] = ()
    if tree is not None and points:
        locations = _attribute_points(ev, tree, user, points, steps, top)
    return SyncStats(count=len(points), blocked_us=blocked, locations=locations)


def _contains_any(table: Table, rows: np.ndarray, inner: Table, inner_rows: np.ndarray) -> np.ndarray:
    """For each of `rows` (not nested among themselves): does it contain an inner row?"""
    hit = np.zeros(rows.size, dtype=bool)
    if rows.size == 0 or inner_rows.size == 0:
        return hit
    position = {int(r): i for i, r in enumerate(rows.tolist())}
    for tid, srows in _threads(table, rows).items():
        sel = inner_rows[inner.tid[inner_rows] == tid]
        if sel.size == 0:
            continue
        idx = intervals.window_index(inner.ts[sel], table.ts[srows], table.end[srows])
        for k in np.unique(idx[idx >= 0]).tolist():
            hit[position[int(srows[k])]] = True
    return hit


def _attribute_points(
    ev: TraceEvents,
    tree: PyTree,
    user: UserCode,
    points: Iterable[tuple[int, float, float]],
    steps: Steps,
    top: int,
) -> tuple[SourceLocation, ...]:
    py = ev.python
    user_rows = ev.code_mask(user.is_user_frame_name)[py.name]
    nearest_user = nearest_flagged(tree.parent, user_rows)
    counts: dict[int, int] = defaultdict(int)
    times: dict[int, float] = defaultdict(float)
    for tid, t, dur in points:
        row = innermost_at(py, tree, tid, t)
        if row < 0:
            continue
        target = int(nearest_user[row])
        if target < 0:
            continue
        code = int(py.name[target])
        counts[code] += 1
        times[code] += dur
    total = sum(counts.values())
    ranked = sorted(counts, key=lambda c: (-counts[c], -times[c]))[:top]
    out = []
    for code in ranked:
        frame = parse_frame_name(ev.names[code])
        if frame is None:
            continue
        n = counts[code]
        per = max(1, math.ceil(n / steps.count)) if steps.count else n
        out.append(
            SourceLocation(frame.file, frame.line, frame.function, share=n / total, count=per)
        )
    return tuple(out)


# --------------------------------------------------------------------------- op mix


def aten_ops_in_steps(ev: TraceEvents, steps: Steps) -> int:
    rows = _rows_named(ev.cpu_ops, ev.code_mask(lambda n: n.startswith("aten::")))
    if steps.count:
        rows = rows[steps.contains(ev.cpu_ops.ts[rows])]
    return int(rows.size)


@dataclass(frozen=True)
class OpShares:
    conv_frac: float | None
    matmul_frac: float | None
    fp32_frac: float | None
    misaligned_lowp_gemms: int
    basis: str  # "gpu_kernel_time" or "cpu_op_time"


def _first_float_type(types: list[object]) -> str | None:
    for t in types:
        if isinstance(t, str) and t in FLOAT_TYPES:
            return t
    return None


def _misaligned(dims: list[object]) -> bool:
    for shape in dims:
        if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape):
            if any(d % 8 for d in shape[-2:]):
                return True
    return False


def op_shares(ev: TraceEvents, steps: Steps) -> OpShares:
    """Share of op time in convolutions / GEMMs, and in fp32 ones.

    On a GPU trace the basis is kernel time, attributed to the op whose interval contains the
    kernel's launch call; on a CPU trace it is the op's own time against all top-level op
    time. Precision comes from the innermost GEMM/conv op: under autocast the outer
    aten::linear still sees fp32 inputs, its nested aten::addmm sees bf16.
    """
    ops = ev.cpu_ops
    conv_mask = ev.code_mask(lambda n: n in CONV_OPS)
    mm_mask = ev.code_mask(lambda n: n in MATMUL_OPS)
    align_mask = ev.code_mask(lambda n: n in ALIGNMENT_OPS)
    fam_rows = np.flatnonzero(conv_mask[ops.name] | mm_mask[ops.name]) if len(ops) else np.empty(0, dtype=np.int64)
    if steps.count:
        fam_rows = fam_rows[steps.contains(ops.ts[fam_rows])]
    leaf = _leaf_rows(ops, fam_rows)
    fp32_rows: list[int] = []
    misaligned = 0
    for row in leaf.tolist():
        types, dims = ev.shapes.get(row, ([], []))
        dtype = _first_float_type(types)
        if dtype == "float":
            fp32_rows.append(row)
        elif dtype in LOW_PRECISION and align_mask[ops.name[row]] and _misaligned(dims):
            misaligned += 1
    fp32 = np.array(fp32_rows, dtype=np.int64)
    conv_rows = fam_rows[conv_mask[ops.name[fam_rows]]]
    mm_rows = fam_rows[mm_mask[ops.name[fam_rows]]]

    gpu = ev.gpu
    kernels = np.flatnonzero(gpu.col("kind") == 0) if len(gpu) else np.empty(0, dtype=np.int64)
    if kernels.size:
        launch_tid, launch_ts, kernel_rows = _kernel_launches(ev, kernels, steps)
        total = float(gpu.dur[kernel_rows].sum())
        if total <= 0:
            return OpShares(None, None, None, misaligned, "gpu_kernel_time")

        def share(rows: np.ndarray) -> float:
            hit = _points_in_thread_spans(ops, rows, launch_tid, launch_ts)
            return float(gpu.dur[kernel_rows][hit].sum()) / total

        return OpShares(share(conv_rows), share(mm_rows), share(fp32), misaligned, "gpu_kernel_time")

    all_rows = np.arange(len(ops))
    if steps.count:
        all_rows = all_rows[steps.contains(ops.ts)]
    denominator = _thread_union_time(ops, all_rows)
    if denominator <= 0:
        return OpShares(None, None, None, misaligned, "cpu_op_time")
    return OpShares(
        _thread_union_time(ops, conv_rows) / denominator,
        _thread_union_time(ops, mm_rows) / denominator,
        _thread_union_time(ops, fp32) / denominator,
        misaligned,
        "cpu_op_time",
    )


def _leaf_rows(ops: Table, rows: np.ndarray) -> np.ndarray:
    """Rows that contain no other row of the set on their thread."""
    out = []
    for srows in _threads(ops, rows).values():
        starts = ops.ts[srows]
        ends = ops.end[srows]
        nested_next = np.zeros(srows.size, dtype=bool)
        nested_next[:-1] = starts[1:] < ends[:-1]
        out.append(srows[~nested_next])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _thread_union_time(table: Table, rows: np.ndarray) -> float:
    return sum(
        intervals.total(*intervals.union(table.ts[r], table.end[r]))
        for r in _threads(table, rows).values()
    )


def _union_by_thread(
    spans: Iterable[tuple[Table, np.ndarray]],
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per thread, the union of the spans of several tables (a user_annotation and the
    cpu_op it wraps are one interval, not two)."""
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for table, rows in spans:
        for tid, srows in _threads(table, rows).items():
            parts[tid].append((table.ts[srows], table.end[srows]))
    return {
        tid: intervals.union(np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps]))
        for tid, ps in parts.items()
    }


def _points_in_thread_spans(
    table: Table, rows: np.ndarray, point_tid: np.ndarray, point_ts: np.ndarray
) -> np.ndarray:
    hit = np.zeros(point_ts.size, dtype=bool)
    for tid, srows in _threads(table, rows).items():
        lo, hi = intervals.union(table.ts[srows], table.end[srows])
        sel = point_tid == tid
        hit[sel] = intervals.point_in(point_ts[sel], lo, hi)
    return hit


def _kernel_launches(
    ev: TraceEvents, kernels: np.ndarray, steps: Steps
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(launch thread, launch time, kernel row) of kernels launched inside the steps."""
    rt = ev.runtime
    corr = ev.gpu.col("correlation")[kernels]
    rt_corr = rt.col("correlation") if len(rt) else np.empty(0, dtype=np.int64)
    by_corr = np.argsort(rt_corr, kind="stable")
    pos = np.clip(np.searchsorted(rt_corr[by_corr], corr), 0, max(rt_corr.size - 1, 0))
    found = (corr >= 0) & (rt_corr.size > 0)
    if rt_corr.size:
        found &= rt_corr[by_corr][pos] == corr
    rt_rows = by_corr[pos]
    kernel_rows = kernels[found]
    launch_ts = rt.ts[rt_rows[found]] if rt_corr.size else np.empty(0)
    launch_tid = rt.tid[rt_rows[found]] if rt_corr.size else np.empty(0, dtype=np.int64)
    if steps.count:
        keep = steps.contains(launch_ts)
        return launch_tid[keep], launch_ts[keep], kernel_rows[keep]
    return launch_tid, launch_ts, kernel_rows


# --------------------------------------------------------------------------- optimizer


def single_tensor_optimizer(ev: TraceEvents) -> bool | None:
    """True when a `_single_tensor_*` optimizer implementation ran.

    With stacks it is a Python frame (`torch/optim/adam.py(347): _single_tensor_adam`);
    without them, an Optimizer.step span with per-parameter arithmetic and no _foreach_/
    _fused_ op says the same.
    """
    if ev.name_codes(lambda n: "_single_tensor_" in n).size:
        named = ev.code_mask(lambda n: "_single_tensor_" in n)
        if _rows_named(ev.python, named).size or _rows_named(ev.cpu_ops, named).size:
            return True
    ann = ev.annotations
    step_rows = _rows_named(ann, ev.code_mask(lambda n: n.startswith("Optimizer.step#")))
    if step_rows.size == 0:
        return None
    ops = ev.cpu_ops
    vector_rows = _rows_named(
        ops, ev.code_mask(lambda n: n.startswith(("aten::_foreach_", "aten::_fused_")))
    )
    if _inside_spans(ops, vector_rows, ann, step_rows).any():
        return False
    scalar_rows = _rows_named(ops, ev.code_mask(lambda n: n.startswith(_PER_PARAM_OPS)))
    if _inside_spans(ops, scalar_rows, ann, step_rows).any():
        return True
    return None


def zero_grad_zeroing(ev: TraceEvents) -> tuple[bool | None, int]:
    """Whether zero_grad zeroed gradients (aten::zero_) instead of setting them to None."""
    spans: list[tuple[Table, np.ndarray]] = []
    ann_rows = _rows_named(
        ev.annotations, ev.code_mask(lambda n: n.startswith("Optimizer.zero_grad#"))
    )
    spans.append((ev.annotations, ann_rows))
    py_rows = _rows_named(ev.python, ev.code_mask(lambda n: n.endswith(": zero_grad")))
    spans.append((ev.python, py_rows))
    if ann_rows.size == 0 and py_rows.size == 0:
        return None, 0
    ops = ev.cpu_ops
    zero_rows = _rows_named(ops, ev.code_mask(lambda n: n in ZERO_OPS))
    hit = np.zeros(zero_rows.size, dtype=bool)
    for table, rows in spans:
        hit |= _inside_spans(ops, zero_rows, table, rows)
    count = int(hit.sum())
    return count > 0, count


# --------------------------------------------------------------------------- copies to device


def tensors_created_then_copied(ev: TraceEvents, steps: Steps) -> int | None:
    """Host-to-device copies of tensors that the step itself had just created on the CPU.

    TorchTidy's ExtraCUDACopyPattern from the trace alone: an HtoD memcpy whose launching
    top-level op (aten::to / _to_copy / copy_) directly follows, on the same thread, a
    top-level factory op (zeros, randn, tensor(...), ...). None on traces without GPU copies.
    """
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    htod_mask = ev.code_mask(lambda n: n.startswith("Memcpy HtoD"))
    copies = np.flatnonzero((gpu.col("kind") == 1) & htod_mask[gpu.name])
    if copies.size == 0:
        return 0
    launch_tid, launch_ts, _ = _kernel_launches(ev, copies, steps)
    ops = ev.cpu_ops
    top_rows = _top_level_rows(ops)
    factory = ev.code_mask(lambda n: n in FACTORY_OPS)
    to_device = ev.code_mask(lambda n: n in COPY_TO_DEVICE_OPS)
    count = 0
    for tid, rows in _threads(ops, top_rows).items():
        sel = launch_tid == tid
        if not sel.any():
            continue
        starts = ops.ts[rows]
        i = np.searchsorted(starts, launch_ts[sel], side="right") - 1
        for k in i.tolist():
            if k < 1:
                continue
            op, prev = int(rows[k]), int(rows[k - 1])
            if to_device[ops.name[op]] and factory[ops.name[prev]]:
                count += 1
    return count


def _top_level_rows(ops: Table) -> np.ndarray:
    out = []
    for srows in _threads(ops, np.arange(len(ops))).values():
        ends = np.maximum.accumulate(ops.end[srows])
        top = np.ones(srows.size, dtype=bool)
        top[1:] = ops.ts[srows][1:] >= ends[:-1]
        out.append(srows[top])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


# --------------------------------------------------------------------------- data loading


@dataclass(frozen=True)
class DataLoading:
    total_us: float
    locations: tuple[SourceLocation, ...]


def data_loading(
    ev: TraceEvents, steps: Steps, tree: PyTree | None, user: UserCode, top: int = 5
) -> DataLoading:
    """DataLoader __next__ time, and where it goes in Python, by function and line.

    The self time of every Python frame inside a `enumerate(DataLoader)#...__next__` span is
    charged to the innermost frame of the user's own code around it (their Dataset or
    collate function); time with no user frame inside the span goes to the innermost library
    frame (e.g. default_collate), so library-side costs are named too.
    """
    is_dl: Callable[[str], bool] = lambda n: n.startswith(DATALOADER_PREFIXES)  # noqa: E731
    spans: list[tuple[Table, np.ndarray]] = []
    for table in (ev.annotations, ev.cpu_ops):
        rows = _rows_named(table, ev.code_mask(is_dl))
        if steps.count:
            rows = rows[steps.contains(table.ts[rows])]
        if rows.size:
            spans.append((table, rows))
    by_thread = _union_by_thread(spans)
    total = sum(intervals.total(lo, hi) for lo, hi in by_thread.values())
    if tree is None or total <= 0 or len(ev.python) == 0:
        return DataLoading(total, ())
    py = ev.python
    all_rows = np.arange(len(py))
    inside = np.zeros(len(py), dtype=bool)
    py_end = py.end
    for tid, (lo, hi) in by_thread.items():
        sel = np.flatnonzero(py.tid == tid)
        idx = intervals.window_index(py.ts[sel], lo, hi)
        ok = idx >= 0
        ok[ok] = py_end[sel][ok] <= hi[idx[ok]] + 1e-3
        inside[sel[ok]] = True
    if not inside.any():
        return DataLoading(total, ())
    user_flag = ev.code_mask(user.is_user_frame_name)[py.name]
    named_flag = ev.code_mask(lambda n: parse_frame_name(n) is not None)[py.name]
    to_user = nearest_flagged(tree.parent, user_flag & inside)
    to_named = nearest_flagged(tree.parent, named_flag & inside)
    target = np.where(to_user >= 0, to_user, np.where(to_named >= 0, to_named, all_rows))
    rows = np.flatnonzero(inside)
    codes = py.name[target[rows]]
    sums = np.bincount(codes, weights=tree.self_us[rows], minlength=len(ev.names))
    ranked = np.argsort(-sums, kind="stable")[:top]
    out = []
    for code in ranked.tolist():
        if sums[code] <= 0:
            break
        frame = parse_frame_name(ev.names[code])
        if frame is None:
            frame_file, line, func = ev.names[code], 0, ""
        else:
            frame_file, line, func = frame.file, frame.line, frame.function
        out.append(SourceLocation(frame_file, line, func, share=float(sums[code]) / total))
    return DataLoading(total, tuple(out))


# --------------------------------------------------------------------------- communication


def comm_time(ev: TraceEvents, steps: Steps) -> float:
    """Host time inside collective ops (nccl:/gloo:/c10d::), union per thread, in the steps."""
    is_comm: Callable[[str], bool] = lambda n: n.startswith(COMM_PREFIXES)  # noqa: E731
    mask = ev.code_mask(is_comm)
    spans = [(t, _rows_named(t, mask)) for t in (ev.cpu_ops, ev.annotations)]
    total = 0.0
    for us, ue in _union_by_thread(spans).values():
        if steps.count:
            us, ue = intervals.clip(us, ue, steps.lo, steps.hi)
        total += intervals.total(us, ue)
    return total
