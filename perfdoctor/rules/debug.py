"""Debug settings left on: anomaly detection, a profiler, NVTX emission, grad-mode evaluation."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import (
    Rule,
    compute_share,
    ev,
    flag,
    locations,
    num,
    pct,
    seen,
    severity_for_gain,
    where,
)

ANOMALY_DETECTION = "anomaly-detection-on"
USER_PROFILER = "user-profiler-on"
EMIT_NVTX = "emit-nvtx-on"
GRAD_WITHOUT_BACKWARD = "grad-without-backward"

_DEBUG_MODES = "debug-modes"


def _autograd_share(facts: Facts) -> tuple[float, str]:
    """Share of the step that anomaly mode slows down, and how it was chosen."""
    fwd = num(facts, "forward_frac")
    bwd = num(facts, "backward_frac")
    if fwd is not None and bwd is not None:
        return min(1.0, fwd + bwd), "forward + backward share"
    return compute_share(facts), "non-data share"


def check_anomaly(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "anomaly_detection_enabled") is not True:
        return None
    share, basis = _autograd_share(facts)
    gain = share * (1.0 - 1.0 / t["assumed_slowdown"])
    locs = locations(facts, "debug_mode")
    return Finding(
        rule_id=ANOMALY_DETECTION,
        severity=severity_for_gain(gain, floor="warning"),
        title="Autograd anomaly detection is on during training",
        explanation=(
            "torch.autograd.set_detect_anomaly / detect_anomaly records a Python stack for "
            "every forward op and checks every backward output for NaN. It is a debugging "
            f"tool: in measurements here it slowed training steps {t['assumed_slowdown']:g}x "
            f"or more.{where(locs)}"
        ),
        evidence=(
            ev("anomaly_detection_enabled", True),
            *seen(facts, "forward_frac", "backward_frac"),
        ),
        locations=locs,
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"{basis} x (1 - 1/{t['assumed_slowdown']:g}), the smallest slowdown measured here"
            ),
        ),
    )


def check_user_profiler(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "user_profiler_active") is not True:
        return None
    gain = compute_share(facts) * (1.0 - 1.0 / t["profiler_overhead"])
    locs = locations(facts, "debug_mode")
    return Finding(
        rule_id=USER_PROFILER,
        # Capped at warning: a scheduled profiler records only some steps.
        severity="warning",
        title="The script runs its own torch.profiler while training",
        explanation=(
            "A torch.profiler session is active in the script. While it records, every op "
            f"pays the profiler's callbacks ({t['profiler_overhead']:g}x the step time with "
            "CPU activity alone, more with shapes, memory and stacks), and it competes with "
            f"perfdoctor's own window. Profile a few steps, not the whole run.{where(locs)}"
        ),
        evidence=(ev("user_profiler_active", True),),
        locations=locs,
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"upper bound while it records: non-data share x (1 - 1/{t['profiler_overhead']:g})"
            ),
        ),
    )


def check_emit_nvtx(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "emit_nvtx_enabled") is not True:
        return None
    locs = locations(facts, "debug_mode")
    return Finding(
        rule_id=EMIT_NVTX,
        severity="warning",
        title="autograd.profiler.emit_nvtx is on outside an Nsight session",
        explanation=(
            "emit_nvtx pushes and pops an NVTX range around every op (with shapes when "
            "record_shapes is set). It only helps under nsys; in normal training it is pure "
            f"per-op overhead.{where(locs)}"
        ),
        evidence=(ev("emit_nvtx_enabled", True),),
        locations=locs,
        gain=GainEstimate(method="not estimated: per-op overhead; re-run measures"),
    )


def check_grad_without_backward(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    count = num(facts, "grad_forwards_without_backward")
    if count is None or count < t["min_forwards"]:
        return None
    frac = num(facts, "grad_forwards_without_backward_frac")
    share = f" ({pct(frac)} of all model forwards)" if frac is not None else ""
    locs = locations(facts, "grad_without_backward")
    return Finding(
        rule_id=GRAD_WITHOUT_BACKWARD,
        severity="warning",
        title=f"{count:g} forward passes build an autograd graph that no backward uses",
        explanation=(
            f"{count:g} model forwards{share} ran with gradients enabled but never reached "
            "backward: evaluation or inference without torch.no_grad()/inference_mode(). "
            "Each keeps activations for a backward that never comes, costing memory and time. "
            f"Wrap them in `with torch.inference_mode():`.{where(locs)}"
        ),
        evidence=(
            ev("grad_forwards_without_backward", int(count), int(t["min_forwards"]), ">="),
            *seen(facts, "grad_forwards_without_backward_frac"),
        ),
        locations=locs,
        gain=GainEstimate(
            method="not estimated: activation memory and autograd bookkeeping of those passes"
        ),
    )


_PROFILER_OVERHEAD_SOURCE = (
    "1.45x: torch.profiler with CPU activity only on an op-heavy model (mechanics.md §6.1, "
    "exp e6), the cheapest configuration"
)

RULES = (
    Rule(
        id=ANOMALY_DETECTION,
        title="Autograd anomaly detection left on",
        area="debug",
        needs=("anomaly_detection_enabled",),
        uses=("forward_frac", "backward_frac", "data_wait_frac"),
        thresholds={"assumed_slowdown": 1.25},
        source=(
            "measured here: anomaly mode slowed a CNN step 1.25x and an MLP step 1.94x on this "
            "CPU (perfdoctor/rules/threshold_measurements.md); the smaller is used"
        ),
        description="torch.autograd anomaly mode active while training.",
        check=check_anomaly,
        topics=("debug_mode",),
        optimizations=("anomaly-off",),
        root_cause=_DEBUG_MODES,
    ),
    Rule(
        id=USER_PROFILER,
        title="The script's own profiler left on",
        area="debug",
        needs=("user_profiler_active",),
        uses=("data_wait_frac",),
        thresholds={"profiler_overhead": 1.45},
        source=_PROFILER_OVERHEAD_SOURCE,
        description="A torch.profiler session started by the script during training.",
        check=check_user_profiler,
        topics=("debug_mode",),
        optimizations=("debug-modes-off",),
        root_cause=_DEBUG_MODES,
    ),
    Rule(
        id=EMIT_NVTX,
        title="NVTX emission left on",
        area="debug",
        needs=("emit_nvtx_enabled",),
        thresholds={},
        source="PyTorch autograd profiler docs (emit_nvtx is for nvprof/nsys sessions)",
        description="torch.autograd.profiler.emit_nvtx active while training.",
        check=check_emit_nvtx,
        topics=("debug_mode",),
        optimizations=("debug-modes-off",),
        root_cause=_DEBUG_MODES,
    ),
    Rule(
        id=GRAD_WITHOUT_BACKWARD,
        title="Forward passes with autograd on and no backward (eval without no_grad)",
        area="debug",
        needs=("grad_forwards_without_backward",),
        uses=("grad_forwards_without_backward_frac",),
        thresholds={"min_forwards": 1.0},
        source=(
            "PyTorch autograd docs (no_grad / inference_mode for evaluation); counted by the "
            "child (root forwards whose graph no backward consumed); any occurrence"
        ),
        description=(
            "Evaluation or inference under grad mode, including set_grad_enabled(True) "
            "misuse, with the lines that run it."
        ),
        check=check_grad_without_backward,
        topics=("grad_without_backward",),
        optimizations=("no-grad-eval",),
    ),
)
