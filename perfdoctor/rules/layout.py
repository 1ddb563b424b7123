"""Memory layout: channels_last for convolution-heavy models on tensor-core GPUs.

Not suggested on the CPU: oneDNN already reorders conv weights into its own blocked layout, so
an NHWC model is not a CPU win by default and can add reorder copies; without a measurement
that says otherwise, perfdoctor keeps quiet there (the rule is CUDA-only).
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, compute_capability, ev, flag, num, pct, severity_for_gain
from perfdoctor.rules.lowp import LOWP_SOURCE, computes_in_low_precision

CHANNELS_LAST = "channels-last"


def check_channels_last(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    cc = compute_capability(facts)
    convs = num(facts, "model_conv_count")
    conv = num(facts, "conv_ms_frac")
    if cc is None or convs is None or conv is None or cc < t["min_compute_capability"]:
        return None
    if flag(facts, "model_channels_last") is not False or convs < 1 or conv < t["conv_frac"]:
        return None
    low_precision = flag(facts, "autocast_used") is True or computes_in_low_precision(
        facts, t["lowp_kernel_frac"]
    )
    saving = t["assumed_saving_lowp"] if low_precision else t["assumed_saving_fp32"]
    gain = conv * saving
    precision_note = (
        "Under autocast the tensor-core conv kernels want NHWC, so NCHW tensors are "
        "transposed around every convolution."
        if low_precision
        else "It pays most under mixed precision: apply AMP first, then channels_last."
    )
    return Finding(
        rule_id=CHANNELS_LAST,
        severity=severity_for_gain(gain),
        title=f"Convolutions ({pct(conv)} of op time) run in NCHW layout",
        explanation=(
            f"The model has {convs:.0f} convolutions taking {pct(conv)} of op time, and its "
            f"tensors are NCHW. {precision_note} model.to(memory_format=torch.channels_last) "
            "plus channels_last inputs avoid that."
        ),
        evidence=(
            ev("conv_ms_frac", conv, t["conv_frac"], ">="),
            ev("model_channels_last", False),
            ev("model_conv_count", convs, 1, ">="),
            ev("gpu_compute_capability", cc, t["min_compute_capability"], ">="),
            ev("autocast_used", low_precision),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=f"conv share x {saving:g} (assumed; larger under AMP; the re-run measures)",
        ),
    )


RULES = (
    Rule(
        id=CHANNELS_LAST,
        title="channels_last for a convolution-heavy model",
        area="layout",
        needs=(
            "device_is_cuda",
            "gpu_compute_capability",
            "model_conv_count",
            "conv_ms_frac",
            "model_channels_last",
        ),
        uses=("autocast_used", "lowp_matmul_kernel_frac"),
        thresholds={
            "min_compute_capability": 7.0,
            "conv_frac": 0.3,
            "assumed_saving_lowp": 0.2,
            "assumed_saving_fp32": 0.05,
            "lowp_kernel_frac": 0.5,
        },
        source=(
            "no surveyed tool detects it (prior-art.md (b); Composer applies it blindly); "
            "CC >= 7 for NHWC tensor-core kernels per NVIDIA's cuDNN performance guide; convs "
            ">= 30% of op time and the savings are choices here, measured by the re-run; "
            f"{LOWP_SOURCE}"
        ),
        description=(
            "Convolutions dominate on a tensor-core GPU and the model is NCHW. CUDA only: on "
            "the CPU channels_last is not a win by default."
        ),
        check=check_channels_last,
        device="cuda",
        optimizations=("channels-last",),
    ),
)
