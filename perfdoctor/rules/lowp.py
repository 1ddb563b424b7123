"""Does the run already compute in low precision? The guard every autocast / TF32 advice
passes first: the kernels' names (analyze/kernel_precision.py) say what the GEMMs, convolutions
and attention run in, FP8 and AMD matrix-core bf16 included, whatever the script's autocast
state (a run may cast its model to bf16, or call FP8 GEMMs directly, without autocast)."""

from __future__ import annotations

from perfdoctor.model import Facts
from perfdoctor.rules.base import num

LOWP_SOURCE = (
    "lowp_kernel_frac: at least this share of the GEMM/conv/attention kernel time already in "
    "fp4/MX/fp8/int8/bf16/fp16 (kernel names, analyze/kernel_precision.py): autocast or TF32 "
    "has nothing left to move (choice here: the majority)"
)


def computes_in_low_precision(facts: Facts, lowp_kernel_frac: float) -> bool:
    """By the kernels, not the autocast flag: under autocast some matmuls may still run in
    fp32 (outside the autocast region, or ops autocast keeps in fp32), and without autocast a
    model cast to bf16 or calling FP8 GEMMs directly computes in low precision all the same."""
    lowp = num(facts, "lowp_matmul_kernel_frac")
    return lowp is not None and lowp >= lowp_kernel_frac
