"""cuDNN: benchmark mode off with convolutions at stable shapes; deterministic mode's cost."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, severity_for_gain

CUDNN_BENCHMARK_OFF = "cudnn-benchmark-off"
CUDNN_DETERMINISTIC = "cudnn-deterministic"


def check_benchmark_off(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    conv = num(facts, "conv_ms_frac")
    if conv is None or flag(facts, "cudnn_benchmark") is not False or conv < t["conv_frac"]:
        return None
    shapes = num(facts, "input_shape_changes")
    # Every new input shape is benchmarked again, so varying shapes can make it slower.
    if shapes is not None and shapes > t["max_distinct_shapes"]:
        return None
    gain = conv * t["assumed_conv_saving"]
    shape_note = (
        f" Input shapes were stable ({shapes:g} distinct after warm-up)."
        if shapes is not None
        else " It pays when input shapes are stable."
    )
    return Finding(
        rule_id=CUDNN_BENCHMARK_OFF,
        severity=severity_for_gain(gain),
        title=f"cudnn.benchmark is off while convolutions take {pct(conv)} of op time",
        explanation=(
            f"Convolutions take {pct(conv)} of the op time and cuDNN picks their algorithms "
            "by heuristic. With torch.backends.cudnn.benchmark = True it times the candidates "
            f"once per input shape and keeps the fastest.{shape_note} Algorithm choice becomes "
            "non-deterministic."
        ),
        evidence=(
            ev("cudnn_benchmark", False),
            ev("conv_ms_frac", conv, t["conv_frac"], ">="),
            *(
                (ev("input_shape_changes", shapes, t["max_distinct_shapes"], "<="),)
                if shapes is not None
                else ()
            ),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"conv share x {t['assumed_conv_saving']:g}, an assumed autotuning saving that "
                "the re-run measures"
            ),
        ),
    )


def check_deterministic(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    conv = num(facts, "conv_ms_frac")
    cudnn_det = flag(facts, "cudnn_deterministic") is True
    algos_det = flag(facts, "deterministic_algorithms") is True
    if conv is None or not (cudnn_det or algos_det) or conv < t["conv_frac"]:
        return None
    gain = conv * t["assumed_conv_saving"]
    which = " and ".join(
        name
        for name, on in (
            ("torch.backends.cudnn.deterministic", cudnn_det),
            ("torch.use_deterministic_algorithms(True)", algos_det),
        )
        if on
    )
    return Finding(
        rule_id=CUDNN_DETERMINISTIC,
        severity="info",
        title=f"Deterministic mode is on; convolutions are {pct(conv)} of op time",
        explanation=(
            f"{which} restricts cuDNN to deterministic algorithms (and excludes "
            "cudnn.benchmark's choices), which are often slower. Keep it if you need bitwise "
            "reproducibility; otherwise turning it off trades reproducibility for speed."
        ),
        evidence=(
            *seen(facts, "cudnn_deterministic", "deterministic_algorithms"),
            ev("conv_ms_frac", conv, t["conv_frac"], ">="),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=f"conv share x {t['assumed_conv_saving']:g} (assumed; the re-run measures)",
        ),
    )


RULES = (
    Rule(
        id=CUDNN_BENCHMARK_OFF,
        title="cudnn.benchmark off with convolutions at stable shapes",
        area="cudnn",
        needs=("device_is_cuda", "cudnn_benchmark", "conv_ms_frac"),
        uses=("input_shape_changes",),
        thresholds={"conv_frac": 0.05, "max_distinct_shapes": 2.0, "assumed_conv_saving": 0.1},
        source=(
            "DLProf expert system 'Convolution operations were detected but "
            "torch.backends.cudnn.benchmark was not enabled'; perfdoctor requires convs >= 5% "
            "of op time and <= 2 distinct input shapes (a last partial batch makes 2)"
        ),
        description="Convolutions with cuDNN autotuning off and input shapes that stay fixed.",
        check=check_benchmark_off,
        device="cuda",
        optimizations=("cudnn-benchmark",),
    ),
    Rule(
        id=CUDNN_DETERMINISTIC,
        title="Deterministic cuDNN / algorithms on, and what it costs",
        area="cudnn",
        needs=("device_is_cuda", "cudnn_deterministic", "deterministic_algorithms", "conv_ms_frac"),
        thresholds={"conv_frac": 0.05, "assumed_conv_saving": 0.1},
        source=(
            "PyTorch reproducibility notes (deterministic algorithms can be slower); info only: "
            "it is usually a deliberate choice"
        ),
        description="Names the cost of deterministic mode when convolutions matter.",
        check=check_deterministic,
        device="cuda",
        optimizations=("cudnn-nondeterministic",),
    ),
)
