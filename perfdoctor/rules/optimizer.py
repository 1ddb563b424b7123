"""Optimizer: single-tensor implementations, zero_grad that zeroes instead of freeing."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import (
    Rule,
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
from perfdoctor.units import format_bytes

SINGLE_TENSOR_OPTIMIZER = "single-tensor-optimizer"
ZERO_GRAD_ZEROING = "zero-grad-zeroing"

_FP32_BYTES = 4
# torch.optim classes with a foreach step but no fused one (fused: Adam, AdamW, SGD, Adagrad).
_KNOWN_WITHOUT_FUSED = frozenset(
    {"Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop"}
)


def _impl(facts: Facts) -> str | None:
    value = text(facts, "optimizer_impl")
    return None if value is None else value.strip().lower().replace("_", "-")


def check_single_tensor(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    share = num(facts, "optimizer_frac")
    single = _impl(facts) == "single-tensor" or flag(facts, "single_tensor_optimizer") is True
    if share is None or not single or share < t["optimizer_frac"]:
        return None
    cls = text(facts, "optimizer_class") or "the optimizer"
    tensors = num(facts, "optimizer_param_tensors")
    one_tensor = tensors is not None and tensors < t["min_param_tensors"]
    if one_tensor and cls in _KNOWN_WITHOUT_FUSED:
        # foreach batches the parameters; with one tensor there is nothing to batch, and the
        # class has no fused kernel: no change to this optimizer would make its step cheaper.
        return None
    gain = share * t["assumed_saving"]
    locs = locations(facts, "optimizer_construct")
    return Finding(
        rule_id=SINGLE_TENSOR_OPTIMIZER,
        severity=severity_for_gain(gain),
        title=f"{cls} steps one tensor at a time ({pct(share)} of the step)",
        explanation=(
            f"optimizer.step takes {pct(share)} of the step and {cls} runs its single-tensor "
            + (
                "loop over its one parameter tensor, several small kernels for one update: "
                "fused=True does the whole update in one kernel (foreach=True would batch "
                "nothing here)."
                if one_tensor
                else "loop, one set of small kernels per parameter. foreach=True batches the "
                "parameters"
                + (
                    " and fused=True does the whole update in one kernel."
                    if cls not in _KNOWN_WITHOUT_FUSED
                    else f" ({cls} has no fused=True)."
                )
            )
            + where(locs)
        ),
        evidence=(
            ev("optimizer_impl", _impl(facts) or "single-tensor"),
            ev("optimizer_frac", share, t["optimizer_frac"], ">="),
            *seen(facts, "optimizer_class", "single_tensor_optimizer", "optimizer_param_tensors"),
        ),
        locations=locs,
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"optimizer share x {t['assumed_saving']:g}, assuming a fused/foreach step "
                "takes at most half the time"
            ),
        ),
    )


def check_zero_grad(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "zero_grad_set_to_none") is not False:
        return None
    params = num(facts, "model_param_count")
    memory = int(params * _FP32_BYTES) if params else None
    mem_note = (
        f" It also keeps about {format_bytes(memory)} of gradients allocated through the next "
        "forward."
        if memory
        else ""
    )
    locs = locations(facts, "zero_grad")
    return Finding(
        rule_id=ZERO_GRAD_ZEROING,
        severity="info",
        title="zero_grad(set_to_none=False) writes zeros into every gradient",
        explanation=(
            "zero_grad is called with set_to_none=False, so every step launches a memset per "
            f"parameter instead of dropping the gradients.{mem_note}{where(locs)}"
        ),
        evidence=(
            ev("zero_grad_set_to_none", False),
            *seen(facts, "zero_grad_zeroing", "model_param_count"),
        ),
        locations=locs,
        gain=GainEstimate(
            memory_bytes=memory,
            method="time not estimated (one memset per parameter); memory: fp32 gradients",
        ),
    )


RULES = (
    Rule(
        id=SINGLE_TENSOR_OPTIMIZER,
        title="Single-tensor optimizer implementation",
        area="optimizer",
        needs=("optimizer_impl", "optimizer_frac"),
        uses=("single_tensor_optimizer", "optimizer_class", "optimizer_param_tensors"),
        thresholds={"optimizer_frac": 0.05, "assumed_saving": 0.5, "min_param_tensors": 2.0},
        source=(
            "torch/profiler/_pattern_matcher.py OptimizerSingleTensorPattern (any "
            "_single_tensor_* op); perfdoctor requires optimizer.step >= 5% of the step "
            "(same 5% floor as the other time rules) so that a cheap step does not warn; "
            "foreach needs >= 2 parameter tensors to batch anything (torch/optim/_multi_tensor: "
            "it groups a list of tensors per device and dtype)"
        ),
        description=(
            "An optimizer running its per-parameter loop (the CPU default) where the step is a "
            "visible share of the time."
        ),
        check=check_single_tensor,
        topics=("optimizer_construct",),
        optimizations=("fused-optimizer",),
    ),
    Rule(
        id=ZERO_GRAD_ZEROING,
        title="zero_grad zeroes gradients instead of setting them to None",
        area="optimizer",
        needs=("zero_grad_set_to_none",),
        uses=("zero_grad_zeroing", "model_param_count"),
        thresholds={},
        source=(
            "torch/profiler/_pattern_matcher.py GradNotSetToNonePattern; set_to_none=True is "
            "PyTorch's default since 2.0"
        ),
        description="zero_grad(set_to_none=False): memsets and gradient memory kept alive.",
        check=check_zero_grad,
        topics=("zero_grad",),
        optimizations=("zero-grad-set-to-none",),
    ),
)
