"""No run that already computes in low precision (by its kernels: FP8 GEMMs, hipBLASLt bf16 on
matrix cores, bf16 without autocast) is told to turn on autocast or TF32 (issue 22)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from perfdoctor.model import Scalar
from perfdoctor.rules import ALL_RULES, evaluate

from .factsets import make_facts

PRECISION_FIXES = {"amp-bf16", "amp-fp16", "tf32"}

# fp32 by the ops' dtypes and no autocast (as a script that casts its model to bf16 by hand,
# or calls FP8 GEMMs, looks to the op-level facts), busy GPU, TF32 off, conv-heavy: every
# precision rule's own trigger is met.
TRIGGERS: dict[str, Scalar] = {
    "autocast_used": False,
    "fp32_matmul_conv_frac": 0.8,
    "matmul_ms_frac": 0.6,
    "tf32_matmul_enabled": False,
    "gpu_busy_frac": 0.97,
    "fp32_matmul_kernel_frac": 0.3,
    "tensor_core_kernel_frac": 0.02,
}


def advice(facts: Mapping[str, Scalar]) -> set[str]:
    results = evaluate(make_facts("gpu", **facts), rules=ALL_RULES)
    return {opt for f in results.findings for opt in f.optimizations}


def test_the_triggers_alone_do_give_precision_advice() -> None:
    assert advice(TRIGGERS) & PRECISION_FIXES


@pytest.mark.parametrize(
    ("what", "lowp", "label"),
    [
        ("FP8 MoE GEMMs (DeepGEMM / CUTLASS grouped)", 0.9, "fp8 on matrix cores"),
        ("hipBLASLt bf16 on MI300X matrix cores", 1.0, "bf16 on matrix cores"),
        ("a model cast to bf16 without autocast", 0.6, "bf16 on matrix cores"),
    ],
)
def test_low_precision_kernels_get_no_autocast_or_tf32(what: str, lowp: float, label: str) -> None:
    facts = {**TRIGGERS, "lowp_matmul_kernel_frac": lowp, "compute_precision": label}
    assert not advice(facts) & PRECISION_FIXES, what


def test_gpu_bound_says_what_the_kernels_compute_in() -> None:
    facts = {
        **TRIGGERS,
        "lowp_matmul_kernel_frac": 0.95,
        "compute_precision": "fp8 on matrix cores",
    }
    results = evaluate(make_facts("gpu", **facts), rules=ALL_RULES)
    (bound,) = [f for f in results.findings if f.rule_id == "gpu-bound"]
    assert "already compute in low precision" in bound.explanation
    assert "fp8 on matrix cores" in bound.explanation and "autocast" not in bound.explanation


def test_fp32_mfma_on_amd_is_pointed_at_bf16_not_tf32() -> None:
    """An MI250 GCD running fp32 GEMMs on its matrix cores: bf16 is the way in; TF32 is not
    PyTorch's to switch on there."""
    facts = {**TRIGGERS, "gpu_vendor": "amd", "gpu_compute_capability": None}
    results = evaluate(make_facts("gpu", **facts), rules=ALL_RULES)
    (bound,) = [f for f in results.findings if f.rule_id == "gpu-bound"]
    assert "amp-bf16" in bound.optimizations and "tf32" not in bound.optimizations
    assert "TF32" not in bound.explanation
