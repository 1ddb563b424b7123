"""Recommendations that follow what was measured, not only what was diagnosed (issue 29
item 7).

The diagnosis ranks fixes by estimated gain before anything is applied. Once variants are
measured, the order is what they proved: every fix accepted by measurement comes first
(fastest first), with its measured gain as the expected one, and is added when no finding
had put it forward (a fix tried for a lesser finding that won); a fix measured and rejected
is not pushed: it moves after the others, with the measurement as a trade-off line. The
fixes not measured keep the diagnosis's order in between. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.model import Facts, GainEstimate, Recommendation, VariantResult
from perfdoctor.optimize.catalog import CATALOG
from perfdoctor.optimize.fix_patch import ProvenFix, proven_fixes
from perfdoctor.optimize.recommend import code_change_for
from perfdoctor.optimize.snippets import title_for


def _measured_gain(fix: ProvenFix) -> GainEstimate:
    frac = None
    if fix.speedup is not None and fix.speedup > 0:
        frac = max(0.0, 1.0 - 1.0 / fix.speedup)
    return GainEstimate(step_time_frac=frac, method=f"measured: {fix.gain_text()}")


def _rejections(variants: Sequence[VariantResult]) -> dict[str, VariantResult]:
    """Fixes whose own variant (that fix alone) was measured and not accepted."""
    return {
        v.optimizations[0]: v
        for v in variants
        if len(v.optimizations) == 1 and v.peel_of is None and v.verdict != "accepted"
    }


def follow_measurement(
    recommendations: Sequence[Recommendation],
    variants: Sequence[VariantResult],
    facts: Facts,
) -> list[Recommendation]:
    if not variants:
        return list(recommendations)
    by_id = {r.optimization_id: r for r in recommendations}
    accepted: list[Recommendation] = []
    for fix in proven_fixes(variants):
        rec = by_id.get(fix.optimization_id)
        if rec is None:
            opt = CATALOG.get(fix.optimization_id)
            if opt is None:
                continue
            rec = Recommendation(
                optimization_id=opt.id,
                title=title_for(opt.id, opt.title, facts),
                kind=opt.kind,
                risk=opt.risk,
                code_change=code_change_for(opt, facts),
                addresses=(),
            )
        accepted.append(replace(rec, expected_gain=_measured_gain(fix)))
    done = {r.optimization_id for r in accepted}
    rejected_runs = _rejections(variants)
    middle, last = [], []
    for rec in recommendations:
        if rec.optimization_id in done:
            continue
        run = rejected_runs.get(rec.optimization_id)
        if run is None:
            middle.append(rec)
            continue
        line = f"measured on this run: {run.verdict} ({run.reason})"
        last.append(replace(rec, conflicts=(*rec.conflicts, line)))
    return [*accepted, *middle, *last]
