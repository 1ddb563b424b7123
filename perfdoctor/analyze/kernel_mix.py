"""The precision the step's GEMM, convolution and attention kernels compute in, by time.

Each kernel is classified by kernel_precision.classify_kernel from its name and, where the
name is silent, the dtype of the op that launched it. The shares answer the question the
precision rules ask: is there fp32 matmul work that autocast or TF32 would move onto tensor
cores, or does the run already compute in bf16/fp16/fp8? Unknown stays unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.kernel_precision import (
    FP32_CLASSES,
    UNKNOWN,
    KernelPrecision,
    classify_kernel,
)
from perfdoctor.analyze.op_kernels import OpKernels
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_ops import first_float_type


@dataclass(frozen=True)
class KernelMix:
    matmul_frac: float  # GEMM/conv/attention kernels, of all kernel time
    lowp_frac: float | None  # of the GEMM/conv/attention kernel time: fp4/MX/fp8/int8/bf16/fp16
    fp32_frac: float  # fp32 SIMT or TF32 GEMM/conv/attention kernels, of all kernel time
    unknown_frac: float | None  # of the GEMM/conv/attention kernel time: precision unknown
    matrix_frac: float  # kernels on tensor/matrix cores (the op's dtype helping), of all time
    dominant: str | None  # the class with the most GEMM/conv/attention time ("bf16 on ...")
    by_class: dict[str, float]  # class label -> share of the GEMM/conv/attention time


def kernel_classes(ev: TraceEvents, found: OpKernels) -> list[KernelPrecision]:
    """One class per kernel of `found.kernels`, using the owning op's dtype: each op's dtype
    is read once (an op launches many kernels), each distinct (kernel name, dtype) is
    classified once, and the classes are spread over the kernels by numpy."""
    if found.kernels.size == 0:
        return []
    codes: dict[str | None, int] = {None: 0}  # dtype -> code; 0: no owner or no float type
    op_dtype = np.fromiter(
        (
            codes.setdefault(first_float_type(ev.shapes.get(op, ([], []))[0]), len(codes))
            for op in found.ops.tolist()
        ),
        dtype=np.int64,
        count=found.ops.size,
    )
    owned = found.owner >= 0
    dtype = np.zeros(found.kernels.size, dtype=np.int64)
    dtype[owned] = op_dtype[found.owner[owned]]
    width = len(codes)
    keys, inverse = np.unique(
        ev.gpu.name[found.kernels].astype(np.int64) * width + dtype, return_inverse=True
    )
    dtypes = list(codes)  # in code order
    table = [classify_kernel(ev.names[key // width], dtypes[key % width]) for key in keys.tolist()]
    return [table[i] for i in inverse.ravel().tolist()]


def kernel_mix(
    ev: TraceEvents, found: OpKernels, classes: list[KernelPrecision]
) -> KernelMix | None:
    durations = ev.gpu.dur[found.kernels]
    total = float(durations.sum())
    if total <= 0:
        return None
    family = np.array([c.family is not None for c in classes], dtype=bool)
    matmul = float(durations[family].sum())
    by_class: dict[str, float] = {}
    lowp = fp32 = unknown = matrix = 0.0
    for cls, dur in zip(classes, durations.tolist(), strict=True):
        if cls.family is None:
            continue
        if cls.matrix_cores:
            matrix += dur
        by_class[cls.label] = by_class.get(cls.label, 0.0) + dur
        if cls.low_precision:
            lowp += dur
        elif cls.precision in FP32_CLASSES:
            fp32 += dur
        elif cls.precision == UNKNOWN:
            unknown += dur
    shares = {k: v / matmul for k, v in by_class.items()} if matmul > 0 else {}
    return KernelMix(
        matmul_frac=matmul / total,
        lowp_frac=lowp / matmul if matmul > 0 else None,
        fp32_frac=fp32 / total,
        unknown_frac=unknown / matmul if matmul > 0 else None,
        matrix_frac=matrix / total,
        dominant=max(shares, key=lambda k: shares[k]) if shares else None,
        by_class=dict(sorted(shares.items(), key=lambda kv: -kv[1])),
    )
