"""Model structure and training health: conv bias before BatchNorm, non-finite losses."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, flag, locations, num, seen, where

CONV_BIAS_BEFORE_BN = "conv-bias-before-bn"
LOSS_NOT_FINITE = "loss-not-finite"


def check_conv_bias(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    count = num(facts, "conv_bias_before_bn_count")
    if count is None or count < t["min_count"]:
        return None
    locs = locations(facts, "conv_bias_before_bn")
    return Finding(
        rule_id=CONV_BIAS_BEFORE_BN,
        severity="info",
        title=f"{count:g} convolutions with a bias feed straight into BatchNorm",
        explanation=(
            "BatchNorm subtracts the per-channel mean, which cancels a preceding convolution's "
            "bias exactly: the bias is computed, stored and updated for nothing. Build those "
            f"convolutions with bias=False.{where(locs)}"
        ),
        evidence=(ev("conv_bias_before_bn_count", int(count), int(t["min_count"]), ">="),),
        locations=locs,
        gain=GainEstimate(method="not estimated: one bias add and its gradient per conv"),
    )


def check_loss_not_finite(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "loss_is_finite") is not False:
        return None
    return Finding(
        rule_id=LOSS_NOT_FINITE,
        severity="critical",
        title="The loss became NaN or infinite during the measured steps",
        explanation=(
            "At least one captured loss was not finite, so the timings describe a run that is "
            "no longer learning, and perfdoctor's numerics guard cannot compare variants "
            "against it. Fix the divergence first (learning rate, fp16 without loss scaling, "
            "bad inputs)."
        ),
        evidence=(
            ev("loss_is_finite", False),
            *seen(facts, "autocast_dtype", "grad_scaler_used"),
        ),
        gain=GainEstimate(method="correctness, not speed"),
    )


RULES = (
    Rule(
        id=CONV_BIAS_BEFORE_BN,
        title="Convolution bias followed by BatchNorm",
        area="model",
        needs=("conv_bias_before_bn_count",),
        thresholds={"min_count": 1.0},
        source="torch/profiler/_pattern_matcher.py Conv2dBiasFollowedByBatchNorm2dPattern",
        description="Conv modules with bias=True whose output goes directly into BatchNorm.",
        check=check_conv_bias,
        topics=("conv_bias_before_bn",),
        optimizations=("conv-bias-off",),
    ),
    Rule(
        id=LOSS_NOT_FINITE,
        title="Non-finite loss",
        area="model",
        needs=("loss_is_finite",),
        uses=("autocast_dtype", "grad_scaler_used"),
        thresholds={},
        source="perfdoctor numerics guard (issue 5): a NaN/inf loss invalidates comparisons",
        description="A captured loss value was NaN or infinite.",
        check=check_loss_not_finite,
    ),
)
