"""Which GEMM/conv/attention op launched each GPU kernel.

The innermost such op wins: under autocast `aten::linear` sees fp32 inputs while its nested
`aten::addmm` sees bf16, and `aten::scaled_dot_product_attention` holds
`_scaled_dot_product_flash_attention` holds `_flash_attention_forward`. The kernel belongs to
the op whose span on the launching thread holds the launch call (CUPTI correlation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.op_flops import FLOP_OPS
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, Table, TraceEvents
from perfdoctor.analyze.trace_index import Steps, launch_points, rows_named, threads


@dataclass(frozen=True)
class OpKernels:
    ops: np.ndarray  # cpu_ops rows: the innermost FLOP ops inside the steps
    kernels: np.ndarray  # gpu rows: the kernels launched inside the steps
    owner: np.ndarray  # per kernel: index into `ops`, -1 when no FLOP op launched it


def flop_op_kernels(ev: TraceEvents, steps: Steps) -> OpKernels:
    ops = ev.cpu_ops
    family = rows_named(ops, ev.code_mask(lambda n: n in FLOP_OPS))
    family = family[steps.contains(ops.ts[family])] if family.size else family
    leaves = innermost(ops, family)
    empty = np.empty(0, dtype=np.int64)
    if len(ev.gpu) == 0:
        return OpKernels(leaves, empty, empty)
    kernels = np.flatnonzero(ev.gpu.col("kind") == GPU_KIND_KERNEL)
    tids, times, rows = launch_points(ev, kernels)
    keep = steps.contains(times)
    tids, times, rows = tids[keep], times[keep], rows[keep]
    owner = np.full(rows.size, -1, dtype=np.int64)
    position = {int(r): i for i, r in enumerate(leaves.tolist())}
    for tid, srows in threads(ops, leaves).items():
        sel = np.flatnonzero(tids == tid)
        if sel.size == 0:
            continue
        # Innermost ops on one thread do not overlap, so the last one starting at or before
        # the launch is the only candidate.
        starts, ends = ops.ts[srows], ops.end[srows]
        at = np.searchsorted(starts, times[sel], side="right") - 1
        inside = (at >= 0) & (times[sel] <= ends[np.maximum(at, 0)])
        owner[sel[inside]] = [position[int(r)] for r in srows[at[inside]].tolist()]
    return OpKernels(leaves, rows, owner)


def innermost(ops: Table, rows: np.ndarray) -> np.ndarray:
    """Rows that contain no other row of the set on their thread."""
    out = []
    for srows in threads(ops, rows).values():
        nested_next = np.zeros(srows.size, dtype=bool)
        nested_next[:-1] = ops.ts[srows][1:] < ops.end[srows][:-1]
        out.append(srows[~nested_next])
    return np.sort(np.concatenate(out)) if out else np.empty(0, dtype=np.int64)
