"""Host-side facts of a parsed trace: syncs, op counts, optimizer, zero_grad, copies, comms.

The per-event work is numpy over `trace_events.TraceEvents` arrays; Python loops only run
over small sets (sync points, threads, distinct names).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import intervals
from perfdoctor.analyze.attribution import Attributor, merge_locations
from perfdoctor.analyze.collectives import is_comm_op
from perfdoctor.analyze.kernels import SYNC_CALLS, is_memcpy_call
from perfdoctor.analyze.trace_events import GPU_KIND_MEMCPY, Table, TraceEvents
from perfdoctor.analyze.trace_index import (
    Point,
    Steps,
    launch_points,
    points,
    rows_in_spans,
    rows_named,
    threads,
    union_by_thread,
)
from perfdoctor.model import SourceLocation

# `.item()` is aten::item -> aten::_local_scalar_dense; the inner op is the actual read, so
# only it is counted (aten::item alone for traces that lack the inner op).
SCALAR_READ_OPS = frozenset({"aten::_local_scalar_dense"})
SCALAR_READ_FALLBACK = frozenset({"aten::item"})
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


def is_device_trace(ev: TraceEvents) -> bool:
    return len(ev.runtime) > 0 or len(ev.gpu) > 0


# --------------------------------------------------------------------------- host syncs


@dataclass(frozen=True)
class SyncStats:
    count: int | None  # None on a CPU-only trace: nothing there waits for a device
    blocked_us: float | None
    locations: tuple[SourceLocation, ...]


def host_syncs(ev: TraceEvents, steps: Steps, attributor: Attributor) -> SyncStats:
    """Points where the host waited for the GPU, and the user's functions behind them.

    A scalar read (`.item()` -> aten::_local_scalar_dense) is a sync only when the tensor is
    on the device, which the trace shows as a copy or synchronize call inside the op; reads
    of CPU tensors (e.g. a single-tensor optimizer's step counters) are not counted. Sync
    calls outside such an op (torch.cuda.synchronize(), a blocking cudaMemcpy) count alone.
    """
    if not is_device_trace(ev):
        return SyncStats(None, None, ())
    ops, rt = ev.cpu_ops, ev.runtime
    reads = rows_named(ops, ev.code_mask(lambda n: n in SCALAR_READ_OPS))
    if reads.size == 0:
        reads = rows_named(ops, ev.code_mask(lambda n: n in SCALAR_READ_FALLBACK))
    calls = rows_named(rt, ev.code_mask(lambda n: n in SYNC_CALLS))
    copies = rows_named(rt, ev.code_mask(lambda n: n in SYNC_CALLS or is_memcpy_call(n)))
    reads = reads[_contains_any(ops, reads, rt, copies)]
    # The cudaStreamSynchronize under a counted _local_scalar_dense is the same sync point.
    if calls.size and reads.size:
        calls = calls[~rows_in_spans(rt, calls, [(ops, reads)])]
    found: list[Point] = []
    for table, rows in ((ops, reads), (rt, calls)):
        found.extend(points(table, rows[steps.contains(table.ts[rows])]))
    return SyncStats(
        count=len(found),
        blocked_us=float(sum(p[2] for p in found)),
        locations=attributor.locate(found, steps),
    )


def _contains_any(
    table: Table, rows: np.ndarray, inner: Table, inner_rows: np.ndarray
) -> np.ndarray:
    """For each of `rows` (not nested among themselves): does it contain an inner row?"""
    hit = np.zeros(rows.size, dtype=bool)
    if rows.size == 0 or inner_rows.size == 0:
        return hit
    position = {int(r): i for i, r in enumerate(rows.tolist())}
    for tid, srows in threads(table, rows).items():
        sel = inner_rows[inner.tid[inner_rows] == tid]
        if sel.size == 0:
            continue
        starts = table.ts[srows]
        k = np.searchsorted(starts, inner.ts[sel], side="right") - 1
        ok = k >= 0
        ok[ok] = inner.ts[sel][ok] <= table.end[srows][k[ok]]
        for j in np.unique(k[ok]).tolist():
            hit[position[int(srows[j])]] = True
    return hit


# --------------------------------------------------------------------------- op counts


def aten_ops_in_steps(ev: TraceEvents, steps: Steps) -> int:
    rows = rows_named(ev.cpu_ops, ev.code_mask(lambda n: n.startswith("aten::")))
    return int(steps.contains(ev.cpu_ops.ts[rows]).sum())


# --------------------------------------------------------------------------- optimizer


def single_tensor_optimizer(ev: TraceEvents) -> bool | None:
    """True when a `_single_tensor_*` optimizer implementation ran.

    With stacks it is a Python frame (`torch/optim/adam.py(347): _single_tensor_adam`);
    without them, an Optimizer.step span holding per-parameter arithmetic and no
    _foreach_/_fused_ op says the same. None when the trace cannot tell.
    """
    named = ev.code_mask(lambda n: "_single_tensor_" in n)
    if rows_named(ev.python, named).size or rows_named(ev.cpu_ops, named).size:
        return True
    ann = ev.annotations
    step_spans = [(ann, rows_named(ann, ev.code_mask(lambda n: n.startswith("Optimizer.step#"))))]
    if step_spans[0][1].size == 0:
        return None
    ops = ev.cpu_ops
    vector = rows_named(
        ops, ev.code_mask(lambda n: n.startswith(("aten::_foreach_", "aten::_fused_")))
    )
    if rows_in_spans(ops, vector, step_spans).any():
        return False
    scalar = rows_named(ops, ev.code_mask(lambda n: n.startswith(_PER_PARAM_OPS)))
    if rows_in_spans(ops, scalar, step_spans).any():
        return True
    return None


@dataclass(frozen=True)
class ZeroGrad:
    zeroing: bool | None  # None: no zero_grad call in the trace
    ops: int
    locations: tuple[SourceLocation, ...]


def zero_grad_zeroing(ev: TraceEvents, steps: Steps, attributor: Attributor) -> ZeroGrad:
    """zero_grad that writes zeros (aten::zero_ / _foreach_zero_) instead of dropping grads."""
    optimizer_calls = ev.code_mask(lambda n: n.startswith("Optimizer.zero_grad#"))
    python_calls = ev.code_mask(lambda n: n.endswith(": zero_grad"))
    spans = [
        (ev.annotations, rows_named(ev.annotations, optimizer_calls)),
        (ev.python, rows_named(ev.python, python_calls)),
    ]
    if all(rows.size == 0 for _, rows in spans):
        return ZeroGrad(None, 0, ())
    ops = ev.cpu_ops
    zeros = rows_named(ops, ev.code_mask(lambda n: n in ZERO_OPS))
    zeros = zeros[rows_in_spans(ops, zeros, spans)]
    zeros = zeros[steps.contains(ops.ts[zeros])]
    return ZeroGrad(zeros.size > 0, int(zeros.size), attributor.locate(points(ops, zeros), steps))


# --------------------------------------------------------------------------- copies to device


@dataclass(frozen=True)
class Copies:
    htod_locations: tuple[SourceLocation, ...]  # pageable first
    created_then_copied: int | None  # None: no GPU copies in the trace
    created_locations: tuple[SourceLocation, ...]


def host_to_device_copies(ev: TraceEvents, steps: Steps, attributor: Attributor) -> Copies:
    """Where HtoD copies come from, and which copy a tensor the step just made on the CPU.

    The second is TorchTidy's ExtraCUDACopyPattern from the trace alone: an HtoD memcpy whose
    launching top-level op (aten::to / _to_copy / copy_) directly follows, on the same
    thread, a top-level factory op (zeros, randn, tensor(...), ...).
    """
    gpu = ev.gpu
    if len(gpu) == 0:
        return Copies((), None, ())
    htod_mask = ev.code_mask(lambda n: n.startswith("Memcpy HtoD"))
    copies = np.flatnonzero((gpu.col("kind") == GPU_KIND_MEMCPY) & htod_mask[gpu.name])
    tids, times, rows = launch_points(ev, copies)
    keep = steps.contains(times)
    tids, times, rows = tids[keep], times[keep], rows[keep]
    pageable = ev.code_mask(lambda n: "Pageable" in n)[gpu.name[rows]]
    weights = np.nan_to_num(gpu.col("bytes")[rows], nan=0.0)

    def launches(sel: np.ndarray) -> list[Point]:
        return list(
            zip(tids[sel].tolist(), times[sel].tolist(), weights[sel].tolist(), strict=True)
        )

    htod = merge_locations(
        attributor.locate(launches(pageable), steps), attributor.locate(launches(~pageable), steps)
    )
    created = _follows_factory(ev, tids, times)
    return Copies(
        htod_locations=htod,
        created_then_copied=int(created.sum()),
        created_locations=attributor.locate(launches(created), steps),
    )


def _follows_factory(ev: TraceEvents, tids: np.ndarray, times: np.ndarray) -> np.ndarray:
    ops = ev.cpu_ops
    out = np.zeros(times.size, dtype=bool)
    factory = ev.code_mask(lambda n: n in FACTORY_OPS)
    to_device = ev.code_mask(lambda n: n in COPY_TO_DEVICE_OPS)
    for tid, rows in threads(ops, _top_level_rows(ops)).items():
        sel = np.flatnonzero(tids == tid)
        if sel.size == 0:
            continue
        k = np.searchsorted(ops.ts[rows], times[sel], side="right") - 1
        op = rows[np.maximum(k, 0)]
        prev = rows[np.maximum(k - 1, 0)]
        # The copy must be launched from inside the to-device op, not merely after it.
        launched_inside = (k >= 1) & (times[sel] <= ops.end[op])
        out[sel] = launched_inside & to_device[ops.name[op]] & factory[ops.name[prev]]
    return out


def _top_level_rows(ops: Table) -> np.ndarray:
    """cpu_op rows not nested in another cpu_op of their thread."""
    out = []
    for srows in threads(ops, np.arange(len(ops))).values():
        reach = np.maximum.accumulate(ops.end[srows])
        top = np.ones(srows.size, dtype=bool)
        top[1:] = ops.ts[srows][1:] >= reach[:-1]
        out.append(srows[top])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


# --------------------------------------------------------------------------- communication


def comm_time(ev: TraceEvents, steps: Steps) -> float:
    """Host time inside collective ops (collectives.is_comm_op: nccl:/gloo:/c10d::) in the
    steps: the union over every thread, so that a collective seen on two threads at once
    (gloo's worker and the caller, DDP's reducer and the main thread) counts once and the
    share stays <= 1."""
    mask = ev.code_mask(is_comm_op)
    spans = [(t, rows_named(t, mask)) for t in (ev.cpu_ops, ev.annotations)]
    per_thread = list(union_by_thread(spans).values())
    if not per_thread:
        return 0.0
    us, ue = intervals.union(
        np.concatenate([s for s, _ in per_thread]), np.concatenate([e for _, e in per_thread])
    )
    if steps.count:
        us, ue = intervals.clip(us, ue, steps.lo, steps.hi)
    return intervals.total(us, ue)
