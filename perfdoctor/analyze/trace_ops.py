"""What the step computes: time in convolutions and GEMMs, in fp32, and misaligned
fp16/bf16 GEMMs (from record_shapes' "Input type" / "Input Dims")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.attribution import Attributor
from perfdoctor.analyze.op_names import CONV_OPS, EMBEDDING_OPS, MATMUL_OPS
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, Table, TraceEvents
from perfdoctor.analyze.trace_index import (
    Steps,
    launch_points,
    points,
    points_in_spans,
    rows_named,
    threads,
    union_time,
)
from perfdoctor.model import SourceLocation

# TorchTidy's MatMulDimInFP16Pattern checks mm/bmm/addmm; baddbmm is the same GEMM.
ALIGNMENT_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"})
MAX_ODD_DIMS = 5
LOW_PRECISION = frozenset({"c10::Half", "c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e5m2"})
FLOAT_TYPES = LOW_PRECISION | {"float", "double"}


@dataclass(frozen=True)
class OpShares:
    conv_frac: float | None
    matmul_frac: float | None
    fp32_frac: float | None  # None without record_shapes
    misaligned_lowp_gemms: int | None  # None without record_shapes
    # The dims (last two of an input) of those GEMMs that are not multiples of 8, a few.
    misaligned_dims: tuple[int, ...]
    # Rows of the largest embedding table looked up in the steps: a vocabulary. None
    # without an embedding op with shapes (a ResNet has none).
    embedding_rows: int | None
    misaligned_locations: tuple[SourceLocation, ...]
    basis: str  # "gpu_kernel_time" or "cpu_op_time"


def first_float_type(types: list[object]) -> str | None:
    for t in types:
        if isinstance(t, str) and t in FLOAT_TYPES:
            return t
    return None


def misaligned(dims: list[object], multiple: int = 8) -> bool:
    """Any tensor input whose last two dims are not all multiples of `multiple`."""
    for shape in dims:
        if not isinstance(shape, list) or not shape:
            continue
        if all(isinstance(d, int) for d in shape) and any(d % multiple for d in shape[-2:]):
            return True
    return False


def op_shares(ev: TraceEvents, steps: Steps, attributor: Attributor) -> OpShares:
    """Share of op time in convolutions / GEMMs, and in fp32 ones.

    On a GPU trace the basis is kernel time, charged to the op whose span holds the kernel's
    launch call; on a CPU trace it is op time against all top-level op time, per thread.
    Precision comes from the innermost GEMM/conv op: under autocast the outer aten::linear
    still sees fp32 inputs while its nested aten::addmm sees bf16.
    """
    ops = ev.cpu_ops
    conv_mask = ev.code_mask(lambda n: n in CONV_OPS)
    mm_mask = ev.code_mask(lambda n: n in MATMUL_OPS)
    align_mask = ev.code_mask(lambda n: n in ALIGNMENT_OPS)
    family = rows_named(ops, conv_mask | mm_mask)
    family = family[steps.contains(ops.ts[family])]
    fp32_rows: list[int] = []
    bad_rows: list[int] = []
    odd_dims: set[int] = set()
    for row in _leaf_rows(ops, family).tolist():
        types, dims = ev.shapes.get(row, ([], []))
        dtype = first_float_type(types)
        if dtype == "float":
            fp32_rows.append(row)
        elif dtype in LOW_PRECISION and align_mask[ops.name[row]] and misaligned(dims):
            bad_rows.append(row)
            odd_dims.update(_odd_dims(dims))
    fp32 = np.array(fp32_rows, dtype=np.int64)
    bad = np.array(bad_rows, dtype=np.int64)
    conv = family[conv_mask[ops.name[family]]]
    mm = family[mm_mask[ops.name[family]]]
    has_shapes = bool(ev.shapes)
    bad_locations = attributor.locate(points(ops, bad), steps)
    misaligned_count = len(bad_rows) if has_shapes else None

    kernels = np.flatnonzero(ev.gpu.col("kind") == GPU_KIND_KERNEL) if len(ev.gpu) else None
    if kernels is not None and kernels.size:
        tids, times, rows = launch_points(ev, kernels)
        keep = steps.contains(times)
        tids, times, rows = tids[keep], times[keep], rows[keep]
        durations = ev.gpu.dur[rows]
        total = float(durations.sum())
        basis = "gpu_kernel_time"

        def share(sel: np.ndarray) -> float | None:
            if total <= 0:
                return None
            return float(durations[points_in_spans(tids, times, [(ops, sel)])].sum()) / total

    else:
        everything = np.arange(len(ops))
        denominator = union_time(ops, everything[steps.contains(ops.ts)])
        basis = "cpu_op_time"

        def share(sel: np.ndarray) -> float | None:
            return union_time(ops, sel) / denominator if denominator > 0 else None

    return OpShares(
        conv_frac=share(conv),
        matmul_frac=share(mm),
        fp32_frac=share(fp32) if has_shapes else None,
        misaligned_lowp_gemms=misaligned_count,
        misaligned_dims=tuple(sorted(odd_dims)[:MAX_ODD_DIMS]),
        embedding_rows=_embedding_rows(ev, steps),
        misaligned_locations=bad_locations,
        basis=basis,
    )


def _odd_dims(dims: list[object], multiple: int = 8) -> list[int]:
    out: list[int] = []
    for shape in dims:
        if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape):
            out.extend(d for d in shape[-2:] if d % multiple)
    return out


def _embedding_rows(ev: TraceEvents, steps: Steps) -> int | None:
    """Rows of the largest embedding weight looked up in the steps (its first input)."""
    ops = ev.cpu_ops
    rows = rows_named(ops, ev.code_mask(lambda n: n in EMBEDDING_OPS))
    rows = rows[steps.contains(ops.ts[rows])] if rows.size else rows
    best = None
    for row in rows.tolist():
        dims = ev.shapes.get(row, ([], []))[1]
        weight = dims[0] if dims else None
        if isinstance(weight, list) and len(weight) == 2 and isinstance(weight[0], int):
            best = max(best or 0, weight[0])
    return best


def _leaf_rows(ops: Table, rows: np.ndarray) -> np.ndarray:
    """Rows that contain no other row of the set on their thread (the innermost op)."""
    out = []
    for srows in threads(ops, rows).values():
        nested_next = np.zeros(srows.size, dtype=bool)
        nested_next[:-1] = ops.ts[srows][1:] < ops.end[srows][:-1]
        out.append(srows[~nested_next])
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)
