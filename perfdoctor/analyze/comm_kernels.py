"""Which GPU kernels are communication: by name (collectives.py), or by where they were
launched from.

A name list always trails the libraries: a DeepEP fork under its own namespace, an NVSHMEM
transport, a vendor all-to-all. What every one of them shares is the host side: the kernel
is put on its stream from inside a collective's host call (record_param_comms, a c10d:: or
nccl:* span, a functional collective, torch.distributed's all_to_all included). A kernel
launched there runs for the collective, whatever its name.

A span a user or library merely named for an all-to-all is not a collective's host call:
TorchRec's `All2All_Pooled_Wait` and `## all2all_data:permute_sparse_features ##` launch
the permute, concatenate and FP8-quantize kernels around the exchange, which are compute
(counting them moved HTA's compute/non-compute split on its own trace by 8%).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze import intervals
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, CommArgs, TraceEvents
from perfdoctor.analyze.trace_index import launch_rows

HostSpans = dict[int, tuple[np.ndarray, np.ndarray, list[tuple[str, CommArgs | None]]]]


def host_spans(ev: TraceEvents) -> HostSpans:
    """Per host thread, the collective ops and spans: (starts, ends, [(name, args)]) by
    start."""
    found: dict[int, list[tuple[float, float, str, CommArgs | None]]] = defaultdict(list)
    mask = ev.code_mask(coll.is_comm_op)
    for table, args in ((ev.cpu_ops, ev.comm_cpu), (ev.annotations, {})):
        if len(table) == 0:
            continue
        rows = np.flatnonzero(mask[table.name])
        # Table.end is computed over the whole table: once, not once per row (24,240 rows of
        # a 216k-event trace took 1.8 s that way).
        starts, ends = table.ts[rows].tolist(), table.end[rows].tolist()
        tids, codes = table.tid[rows].tolist(), table.name[rows].tolist()
        for row, start, end, tid, code in zip(
            rows.tolist(), starts, ends, tids, codes, strict=True
        ):
            found[int(tid)].append((float(start), float(end), ev.names[int(code)], args.get(row)))
    out: HostSpans = {}
    for tid, spans in found.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        out[tid] = (
            np.array([s[0] for s in spans]),
            np.array([s[1] for s in spans]),
            [(s[2], s[3]) for s in spans],
        )
    return out


def enclosing(
    spans: tuple[np.ndarray, np.ndarray, list[tuple[str, CommArgs | None]]], at: float
) -> tuple[str | None, CommArgs | None]:
    """The host collective around time `at`: the innermost span's name, and the args of
    the innermost span that has any."""
    starts, ends, info = spans
    last = int(np.searchsorted(starts, at, side="right"))
    name: str | None = None
    args: CommArgs | None = None
    # Back from the latest span starting before `at`: collective spans are few per thread
    # and seldom nest more than three deep (record_param_comms in c10d:: in nccl:*).
    for i in range(last - 1, max(-1, last - 9), -1):
        if ends[i] < at:
            continue
        op_name, op_args = info[i]
        if name is None and op_name != "record_param_comms":
            name = op_name
        if args is None and op_args is not None:
            args = op_args
        if name is not None and args is not None:
            break
    return name, args


def inside_comm_span(ev: TraceEvents, rows: np.ndarray) -> np.ndarray:
    """For GPU rows, whether their launch call began inside a host collective span on the
    launching thread."""
    out = np.zeros(rows.size, dtype=bool)
    if rows.size == 0:
        return out
    mask = ev.code_mask(coll.is_comm_op)
    spans = [
        (table.tid[sel], table.ts[sel], table.end[sel])
        for table in (ev.cpu_ops, ev.annotations)
        if len(table) and (sel := np.flatnonzero(mask[table.name])).size
    ]
    if not spans:
        return out
    span_tid = np.concatenate([s[0] for s in spans])
    span_lo = np.concatenate([s[1] for s in spans])
    span_hi = np.concatenate([s[2] for s in spans])
    launch = launch_rows(ev, rows)
    found = np.flatnonzero(launch >= 0)
    if found.size == 0:
        return out
    rt = ev.runtime
    tids = rt.tid[launch[found]]
    at = rt.ts[launch[found]]
    for tid in np.unique(span_tid).tolist():
        on = tids == tid
        if on.any():
            mine = span_tid == tid
            lo, hi = intervals.union(span_lo[mine], span_hi[mine])
            out[found[on]] = intervals.point_in(at[on], lo, hi)
    return out


def comm_kernel_mask(ev: TraceEvents, rows: np.ndarray) -> np.ndarray:
    """For GPU rows: a communication kernel, by its name or by its launch inside a host
    collective span. Copies and memsets are not kernels and stay out."""
    gpu = ev.gpu
    named = ev.code_mask(coll.is_comm_kernel)[gpu.name[rows]]
    kernels = gpu.col("kind")[rows] == GPU_KIND_KERNEL
    todo = np.flatnonzero(kernels & ~named)
    if todo.size:
        named = named.copy()
        named[todo] = inside_comm_span(ev, rows[todo])
    return named & kernels
