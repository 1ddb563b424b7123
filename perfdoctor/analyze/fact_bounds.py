"""What a fact cannot exceed, checked before anything prints it.

A share of a window, of a step or of kernel time is at most 1; a rate is at most the device's
peak (flop_rate.within_peak checks those, per op and per step, where the peak is known). A
value past its bound is a bug upstream (a mislinked kernel, a miscounted window), never a
measurement: it is withheld (None, "not measured") and the report says which fact and why,
instead of printing "busy 131%" or an op at 55 TFLOP/s on a 15.7 TFLOP/s GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.analyze.fact_catalog import FACTS
from perfdoctor.model import Scalar

# frac facts that are ratios, not shares: a spread, an excess over the median step, a
# compile that takes many steps, a bus bandwidth over the link table's (a faster link than
# the table's is news, not a bug).
UNBOUNDED_FRACS = frozenset(
    {
        "rank_step_ms_p50_spread_frac",
        "straggler_excess_frac",
        "compile_break_step_frac",
        "compile_recompile_step_frac",
        "comm_busbw_link_frac",
    }
)
# Float noise on a share computed as a sum of parts over their whole.
SHARE_TOLERANCE = 1e-6
# A part of every step against the step it belongs to, both over the same steps and by the
# same statistic: a part is at most its step in every step, so its median is at most the
# step's median (order statistics keep an element-wise bound). Rounding of µs timestamps
# is the only slack.
PARTS_OF_STEP = {"data_wait_ms_p50": "step_ms_p50"}
PART_TOLERANCE = 1.01


def share_facts() -> frozenset[str]:
    """The facts that are shares: at most 1, at least 0."""
    return frozenset(
        name
        for name, doc in FACTS.items()
        if doc.unit in ("frac", "fraction") and name not in UNBOUNDED_FRACS
    )


_SHARES = share_facts()


def within_bounds(values: Mapping[str, Scalar]) -> tuple[dict[str, Scalar], tuple[str, ...]]:
    """`values` with every share outside [0, 1] and every part of a step longer than its
    step withheld, and a line for each saying so."""
    out = dict(values)
    said = []
    for name in sorted(_SHARES):
        value = out.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if -SHARE_TOLERANCE <= value <= 1.0 + SHARE_TOLERANCE:
            continue
        out[name] = None
        said.append(
            f"{name} came out at {value:.1%}, outside 0-100% of what it is a share of: a "
            "miscount upstream, so it is withheld rather than printed"
        )
    for part, whole in PARTS_OF_STEP.items():
        value, step = out.get(part), out.get(whole)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, step)):
            continue
        if value > step * PART_TOLERANCE:  # type: ignore[operator]
            out[part] = None
            said.append(
                f"{part} came out at {value:,.3g} ms, longer than the {step:,.3g} ms step it is "
                "part of: a miscount upstream, so it is withheld rather than printed"
            )
    return out, tuple(said)
