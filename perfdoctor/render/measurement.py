"""How each fix was measured: the method, both arms' quartiles, the interval, the pairs, the
time it took, the numerics check and the load, worded once for every renderer."""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.model import Report, VariantResult
from perfdoctor.render import format as fmt


@dataclass(frozen=True)
class MeasurementRow:
    label: str
    method: str
    baseline: str  # p25 / p50 / p75 of the reference arm's (or runs') steps
    variant: str
    speedup: str  # the statistic with the two step times it comes from
    interval: str
    pairs: str
    took: str
    numerics: str
    load: str


NOTE = (
    "In one process: the fix switched on and off between steps in seeded random blocks of "
    "one child run (a script that ends first is started again, and the pairs of every "
    "process pool in one sequential test); the speedup is the trimmed mean of the paired "
    "block ratios, each block's step time being its median step (paired-medians) or, where "
    "steps are bursty, its wall time over its steps (throughput-windows), and the two step "
    "times beside it are the geometric means of the same block values, so their ratio is "
    "the speedup. By re-runs: separate child runs alternating with the "
    "baseline's (for fixes that cannot be switched in place). Quartiles pool every counted "
    "step of a side and describe it; they are not the statistic. Numerics come from a seeded "
    "run of the fix against the seeded baseline, never from the switched run."
)


def _quartiles(q: tuple[float, float, float] | None) -> str:
    if q is None:
        return fmt.MISSING
    return " / ".join(fmt.ms(v) for v in q)


def _took(v: VariantResult) -> str:
    if v.measure_s is None:
        return fmt.MISSING
    return f"{v.measure_s:.0f} s" if v.measure_s >= 10 else f"{v.measure_s:.1f} s"


def _method(v: VariantResult) -> str:
    """How it was measured, and by which statistic (optimize/engine.py)."""
    if v.method == "in-process":
        processes = v.processes or 1
        where = "in one process" if processes <= 1 else f"in {processes} processes, pooled"
    else:
        where = "re-runs"
    return f"{where}; {v.statistic}" if v.statistic else where


def _row(v: VariantResult) -> MeasurementRow:
    speed = fmt.MISSING
    if v.speedup is not None:
        speed = f"{v.speedup:.2f}x"
        if v.baseline_step_ms_p50 is not None and v.step_ms_p50 is not None:
            speed += f" ({fmt.ms(v.baseline_step_ms_p50)} → {fmt.ms(v.step_ms_p50)})"
    interval = fmt.MISSING
    if v.interval is not None:
        low, high = v.interval
        conf = f" at {v.confidence:.1%}" if v.confidence is not None else ""
        interval = f"{low:.2f}x – {high:.2f}x{conf}"
    elif v.speedup is not None and v.speedup_noise is not None:
        interval = f"from {v.speedup - v.speedup_noise:.2f}x"
    return MeasurementRow(
        label=v.label,
        method=_method(v),
        baseline=_quartiles(v.baseline_quartiles_ms),
        variant=_quartiles(v.quartiles_ms),
        speedup=speed,
        interval=interval,
        pairs=str(v.pairs) if v.pairs is not None else fmt.MISSING,
        took=_took(v),
        numerics=v.numerics or fmt.MISSING,
        load=v.load or v.low_confidence or fmt.MISSING,
    )


def measurement_rows(report: Report) -> list[MeasurementRow]:
    """One row per variant whose measurement has something to say (every in-process one)."""
    return [_row(v) for v in report.variants if v.method == "in-process" or v.pairs is not None]


HEADER = (
    "fix",
    "method",
    "baseline p25/p50/p75",
    "with the fix p25/p50/p75",
    "speedup (step times)",
    "interval",
    "pairs",
    "took",
    "numerics",
    "load meanwhile",
)


def line(row: MeasurementRow) -> str:
    """The row as one line, for the terminal."""
    return (
        f"{row.label}: {row.method}; speedup {row.speedup}, interval {row.interval}; "
        f"{row.pairs} {'pair' if row.pairs == '1' else 'pairs'} in {row.took}; "
        f"p25/p50/p75 {row.baseline} → {row.variant}; "
        f"numerics: {row.numerics}; load: {row.load}"
    )


def cells(row: MeasurementRow) -> tuple[str, ...]:
    return (
        row.label,
        row.method,
        row.baseline,
        row.variant,
        row.speedup,
        row.interval,
        row.pairs,
        row.took,
        row.numerics,
        row.load,
    )
