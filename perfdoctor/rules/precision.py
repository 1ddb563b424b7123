"""Precision: fp32 work on tensor-core GPUs, AMP without/with a needless GradScaler, TF32, dims."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import (
    Rule,
    compute_capability,
    ev,
    flag,
    locations,
    num,
    pct,
    seen,
    severity_for_gain,
    text,
    where,
)
from perfdoctor.rules.lowp import LOWP_SOURCE, computes_in_low_precision
from perfdoctor.units import format_bytes

FP32_ON_TENSOR_CORES = "fp32-on-tensor-cores"
TF32_OFF = "tf32-off"
FP16_WITHOUT_SCALER = "fp16-without-grad-scaler"
SCALER_WITH_BF16 = "grad-scaler-with-bf16"
MISALIGNED_GEMM = "misaligned-lowp-gemm"

_FP32_COMPUTE = "fp32-compute"  # AMP and TF32 answer the same root cause


def _amp_id(facts: Facts, bf16_cc: float) -> str:
    cc = compute_capability(facts)
    return "amp-bf16" if cc is not None and cc >= bf16_cc else "amp-fp16"


def _is_dtype(value: str | None, *names: str) -> bool:
    return value is not None and value.lower().replace("torch.", "") in names


def check_fp32_on_tensor_cores(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    cc = compute_capability(facts)
    share = num(facts, "fp32_matmul_conv_frac")
    if cc is None or share is None or cc < t["min_compute_capability"]:
        return None
    autocast = flag(facts, "autocast_used")
    if autocast is True or share < t["fp32_frac"]:
        return None
    if computes_in_low_precision(facts, t["lowp_kernel_frac"]):
        return None
    # The share is of op (GPU: kernel) time; the GPU runs kernels only `busy` of the step,
    # so the step saves at most that part of it (a V100 ResNet trace 67% fp32 convolutions
    # at 50% busy was skipped outright, which is as wrong as promising 33% of the step).
    busy = num(facts, "gpu_busy_frac")
    # Of the busy time, the compute kernels' part: exposed communication gets nothing from a
    # faster GEMM either.
    compute = num(facts, "gpu_compute_frac")
    if busy is not None and compute is not None:
        busy = min(busy, compute)
    scale = min(max(busy, 0.0), 1.0) if busy is not None else 1.0
    gain = share * t["assumed_speedup_saving"] * scale
    amp = _amp_id(facts, t["bf16_compute_capability"])
    optimizations = [amp]
    if cc >= t["bf16_compute_capability"] and flag(facts, "tf32_matmul_enabled") is False:
        optimizations.append("tf32")
    memory = None
    peak = num(facts, "peak_allocated_bytes")
    activations = num(facts, "activation_bytes_frac")
    if peak is not None and activations is not None:
        memory = int(peak * activations * 0.5)
    dtype = "bf16" if amp == "amp-bf16" else "fp16 (with GradScaler)"
    mem_text = (
        f" Activations in {dtype} also halve, about {format_bytes(memory)}." if memory else ""
    )
    busy_text = (
        f" The GPU runs compute kernels {pct(busy)} of the step, so the step gains at most "
        "that part of their speed-up; what fills the rest of the time is a separate finding."
        if busy is not None and busy < 1.0
        else ""
    )
    no_autocast = (
        "and the script does not autocast"
        if autocast is False
        else "(the kernels compute in fp32: no autocast reaches them)"
    )
    return Finding(
        rule_id=FP32_ON_TENSOR_CORES,
        severity=severity_for_gain(gain, floor="warning"),
        title=f"{pct(share)} of op time is fp32 matmul/conv on a tensor-core GPU",
        explanation=(
            f"This GPU (compute capability {cc:.1f}) has tensor cores, but {pct(share)} of the op "
            f"time runs matmuls and convolutions in fp32 {no_autocast}. "
            f"Mixed precision in {dtype} runs them on tensor cores.{mem_text}{busy_text}"
        ),
        evidence=(
            ev("fp32_matmul_conv_frac", share, t["fp32_frac"], ">="),
            ev("gpu_compute_capability", cc, t["min_compute_capability"], ">="),
            *((ev("autocast_used", False),) if autocast is False else ()),
            *seen(
                facts,
                "gpu_busy_frac",
                "lowp_matmul_kernel_frac",
                "compute_precision",
                "tensor_core_kernel_frac",
                "tensor_active_frac",
            ),
        ),
        optimizations=tuple(optimizations),
        gain=GainEstimate(
            step_time_frac=gain,
            memory_bytes=memory,
            method=(
                f"fp32 matmul/conv share x {t['assumed_speedup_saving']:g}, assuming tensor "
                "cores at least double those ops"
                + (", x the GPU's busy share of the step" if busy is not None else "")
                + "; memory: half the activations"
            ),
        ),
    )


def check_tf32_off(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    cc = compute_capability(facts)
    matmul = num(facts, "matmul_ms_frac")
    fp32 = num(facts, "fp32_matmul_conv_frac")
    if cc is None or matmul is None or fp32 is None or cc < t["min_compute_capability"]:
        return None
    if flag(facts, "tf32_matmul_enabled") is not False:
        return None
    if computes_in_low_precision(facts, t["lowp_kernel_frac"]):
        return None
    # fp32 matmul share is at most both shares: convs use TF32 by default already.
    share = min(matmul, fp32)
    if share < t["fp32_matmul_frac"]:
        return None
    gain = share * t["assumed_speedup_saving"]
    return Finding(
        rule_id=TF32_OFF,
        severity=severity_for_gain(gain),
        title=f"TF32 is off: fp32 matmuls ({pct(share)} of op time) skip the tensor cores",
        explanation=(
            f"On compute capability {cc:.1f} fp32 matmuls can run as TF32 on tensor cores, but "
            "`torch.backends.cuda.matmul.allow_tf32` is off (PyTorch's default since 1.12). "
            "TF32 keeps fp32 range with a 10-bit mantissa: "
            "`torch.set_float32_matmul_precision('high')`."
        ),
        evidence=(
            ev("tf32_matmul_enabled", False),
            ev("matmul_ms_frac", matmul, t["fp32_matmul_frac"], ">="),
            ev("fp32_matmul_conv_frac", fp32, t["fp32_matmul_frac"], ">="),
            ev("gpu_compute_capability", cc, t["min_compute_capability"], ">="),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"fp32 matmul share x {t['assumed_speedup_saving']:g}, assuming TF32 tensor "
                "cores at least double fp32 GEMM throughput"
            ),
        ),
    )


def check_fp16_without_scaler(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "autocast_used") is not True or flag(facts, "grad_scaler_used") is not False:
        return None
    if not _is_dtype(text(facts, "autocast_dtype"), "float16", "half", "fp16"):
        return None
    amp = _amp_id(facts, t["bf16_compute_capability"])
    alternative = " This GPU supports bf16, which needs no scaler." if amp == "amp-bf16" else ""
    return Finding(
        rule_id=FP16_WITHOUT_SCALER,
        severity="critical",
        title="fp16 autocast without a GradScaler: small gradients underflow to zero",
        explanation=(
            "The script autocasts to float16 but never builds a GradScaler. fp16 gradients "
            "below about 6e-8 flush to zero, which silently stalls or destabilises training; "
            "loss scaling (torch.amp.GradScaler, unscale before clipping) prevents it."
            f"{alternative}"
        ),
        evidence=(
            ev("autocast_dtype", text(facts, "autocast_dtype"), "float16", "=="),
            ev("grad_scaler_used", False),
            *seen(facts, "loss_is_finite", "gpu_compute_capability"),
        ),
        optimizations=(amp,),
        gain=GainEstimate(method="correctness: keeps fp16 gradients representable"),
    )


def check_scaler_with_bf16(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "autocast_used") is not True or flag(facts, "grad_scaler_used") is not True:
        return None
    if not _is_dtype(text(facts, "autocast_dtype"), "bfloat16", "bf16"):
        return None
    impl = (text(facts, "optimizer_impl") or "").lower()
    optimizations = ["remove-host-syncs"]
    sync_note = ""
    if impl != "fused":
        optimizations.append("fused-optimizer")
        sync_note = (
            " With a non-fused optimizer GradScaler.step reads the inf check with .item(), a "
            "host sync every step."
        )
    return Finding(
        rule_id=SCALER_WITH_BF16,
        severity="info",
        title="GradScaler used with bf16 autocast, where it is not needed",
        explanation=(
            "bf16 has fp32's exponent range, so gradients do not underflow and loss scaling "
            f"buys nothing.{sync_note} Dropping the scaler removes that work."
        ),
        evidence=(
            ev("autocast_dtype", text(facts, "autocast_dtype"), "bfloat16", "=="),
            ev("grad_scaler_used", True),
            *seen(facts, "optimizer_impl"),
        ),
        optimizations=tuple(optimizations),
        gain=GainEstimate(method="not estimated: one scale/unscale pass and a sync per step"),
    )


def check_misaligned_gemm(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    count = num(facts, "misaligned_lowp_gemm_count")
    if count is None or count < t["min_count"]:
        return None
    locs = locations(facts, "misaligned_gemm")
    dims = text(facts, "misaligned_gemm_dims")
    # Vocabulary padding only where there is a vocabulary to pad: an embedding whose table is
    # not a multiple of 64 (a ResNet's 1000-class classifier got "pad the vocabulary").
    vocab = num(facts, "embedding_rows")
    pad_vocab = vocab is not None and int(vocab) % int(t["vocab_multiple"]) != 0
    which = f" (dims {dims})" if dims else ""
    advice = (
        f"The embedding table has {vocab:,.0f} rows, not a multiple of "
        f"{t['vocab_multiple']:g}: pad the vocabulary (and the LM head that shares it) to one."
        if pad_vocab
        else "Pad the hidden sizes, classifier width or batch to a multiple of 8 and slice the "
        "padding off the output."
    )
    return Finding(
        rule_id=MISALIGNED_GEMM,
        severity="info",
        title=f"{count:g} fp16/bf16 GEMMs have a dimension that is not a multiple of 8",
        explanation=(
            "Tensor-core GEMM kernels need the matrix dimensions in multiples of 8 for 16-bit "
            f"types; other sizes fall back to slower kernels or padding{which}. "
            f"{advice}{where(locs)}"
        ),
        evidence=(
            ev("misaligned_lowp_gemm_count", count, t["min_count"], ">="),
            *seen(facts, "misaligned_gemm_dims", "embedding_rows"),
        ),
        optimizations=("pad-vocab",) if pad_vocab else ("pad-gemm-dims",),
        locations=locs,
        gain=GainEstimate(method="not estimated: depends on the shapes; re-run measures"),
    )


RULES = (
    Rule(
        id=FP32_ON_TENSOR_CORES,
        title="fp32 matmul/conv time on a tensor-core GPU (no autocast)",
        area="precision",
        # autocast_used is observed only in a perfdoctor run; on a trace the kernels' fp32
        # precision (lowp_matmul_kernel_frac) says the same.
        needs=(
            "device_is_cuda",
            "gpu_compute_capability",
            "fp32_matmul_conv_frac",
        ),
        uses=(
            "autocast_used",
            "gpu_busy_frac",
            "gpu_compute_frac",
            "tf32_matmul_enabled",
            "tensor_core_kernel_frac",
            "tensor_active_frac",
            "peak_allocated_bytes",
            "activation_bytes_frac",
            "lowp_matmul_kernel_frac",
            "compute_precision",
        ),
        thresholds={
            "min_compute_capability": 7.0,
            "bf16_compute_capability": 8.0,
            "fp32_frac": 0.2,
            "assumed_speedup_saving": 0.5,
            "lowp_kernel_frac": 0.5,
        },
        source=(
            "CC >= 7 and tensor-core-eligible op time: torch-tb-profiler profiler/data.py rule 6 "
            "and DLProf 'eligible ops but none FP16'; tb_plugin fires only at 0% tensor-core "
            "time, perfdoctor at >= 20% of op time in fp32 matmul/conv (choice here, so partial "
            f"fp32 use is caught); bf16 needs CC >= 8 (Ampere); {LOWP_SOURCE}"
        ),
        description=(
            "Recommends bf16 autocast (Ampere+) or fp16 with GradScaler (Volta/Turing) when "
            "fp32 matmul/conv dominates and the script does not autocast."
        ),
        check=check_fp32_on_tensor_cores,
        selects_optimizations=True,
        device="cuda",
        optimizations=("amp-bf16", "amp-fp16", "tf32"),
        root_cause=_FP32_COMPUTE,
    ),
    Rule(
        id=TF32_OFF,
        title="TF32 matmul off on Ampere or later",
        area="precision",
        needs=(
            "device_is_cuda",
            "gpu_compute_capability",
            "tf32_matmul_enabled",
            "matmul_ms_frac",
            "fp32_matmul_conv_frac",
        ),
        uses=("autocast_used", "lowp_matmul_kernel_frac"),
        thresholds={
            "min_compute_capability": 8.0,
            "fp32_matmul_frac": 0.1,
            "assumed_speedup_saving": 0.5,
            "lowp_kernel_frac": 0.5,
        },
        source=(
            "torch/profiler/_pattern_matcher.py FP32MatMulPattern (any fp32 aten::mm with "
            "allow_tf32 off on sm_80+); perfdoctor requires >= 10% of op time so that a "
            f"negligible matmul does not warn; {LOWP_SOURCE}"
        ),
        description="fp32 matmuls with TF32 disabled on a GPU whose tensor cores support TF32.",
        check=check_tf32_off,
        device="cuda",
        optimizations=("tf32",),
        root_cause=_FP32_COMPUTE,
    ),
    Rule(
        id=FP16_WITHOUT_SCALER,
        title="fp16 autocast without GradScaler",
        area="precision",
        needs=("autocast_used", "grad_scaler_used"),
        uses=("autocast_dtype", "gpu_compute_capability", "loss_is_finite"),
        thresholds={"bf16_compute_capability": 8.0},
        source=(
            "PyTorch AMP docs (torch.amp: fp16 training needs GradScaler); gap noted in "
            "prior-art.md (b): no surveyed tool detects it"
        ),
        description="float16 autocast with no loss scaling: gradient underflow risk.",
        check=check_fp16_without_scaler,
        selects_optimizations=True,
        optimizations=("amp-bf16", "amp-fp16"),
    ),
    Rule(
        id=SCALER_WITH_BF16,
        title="GradScaler used with bf16",
        area="precision",
        needs=("autocast_used", "grad_scaler_used"),
        uses=("autocast_dtype", "optimizer_impl"),
        thresholds={},
        source=(
            "PyTorch AMP docs (bf16 needs no loss scaling); torch/amp/grad_scaler.py "
            "_maybe_opt_step reads found_inf with .item() unless the optimizer is fused"
        ),
        description="A GradScaler with bf16 autocast costs work (and a sync) for nothing.",
        check=check_scaler_with_bf16,
        selects_optimizations=True,
        optimizations=("remove-host-syncs", "fused-optimizer"),
    ),
    Rule(
        id=MISALIGNED_GEMM,
        title="fp16/bf16 GEMM dimensions not multiples of 8",
        area="precision",
        needs=("misaligned_lowp_gemm_count",),
        uses=("misaligned_gemm_dims", "embedding_rows"),
        thresholds={"min_count": 1.0, "vocab_multiple": 64.0},
        source=(
            "torch/profiler/_pattern_matcher.py MatMulDimInFP16Pattern (any occurrence); a "
            "vocabulary padded to 64: nanoGPT's 50257 -> 50304"
        ),
        description="Low-precision mm/bmm/addmm whose last two dims are not multiples of 8.",
        check=check_misaligned_gemm,
        device="cuda",
        topics=("misaligned_gemm",),
        selects_optimizations=True,
        optimizations=("pad-gemm-dims", "pad-vocab"),
    ),
)
