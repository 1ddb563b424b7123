"""Extra A/B rounds for undecided variants: the stopping rule and the run-level band, over
synthetic runs (deterministic: fixed seeds)."""

from __future__ import annotations

import math
import random

import pytest

from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.model import AppliedOptimization, VariantResult
from perfdoctor.optimize.estimate import estimate_speedup
from perfdoctor.optimize.run_level import run_level_half_width, student_t_quantile
from perfdoctor.optimize.sequential import (
    NARROW_LOG_WIDTH,
    RoundsPolicy,
    band_log_width,
    extended_confidence,
    stop_reason,
    undecided,
)
from perfdoctor.optimize.verdicts import compare_variant

POLICY = RoundsPolicy(planned_rounds=2, max_rounds=6, budget_s=100.0)
IDS = ("dataloader-workers",)


def result(verdict: str, reason: str, speedup: float | None, noise: float | None):
    return VariantResult(
        label="v",
        optimizations=IDS,
        step_ms_p50=None,
        step_ms_p90=None,
        speedup=speedup,
        speedup_noise=noise,
        peak_memory_bytes=None,
        loss_delta=None,
        verdict=verdict,  # type: ignore[arg-type]
        reason=reason,
    )


WIDE = result("rejected", "within noise: 1.25x ± 0.46", 1.25, 0.46)
NARROW = result("rejected", "within noise: 1.01x ± 0.02", 1.01, 0.02)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 2, 4.303),
        (0.975, 5, 2.571),
        (0.975, 30, 2.042),
        (0.995, 3, 5.841),
        (0.995, 1, 63.657),
    ],
)
def test_student_t_quantiles_match_the_tables(p, df, expected):
    assert student_t_quantile(p, df) == pytest.approx(expected, abs=2e-3)


def test_run_level_band_needs_three_pairs_and_narrows_with_more():
    assert run_level_half_width([0.1, 0.2], 0.95) is None
    rng = random.Random(1)
    ratios = [0.1 + rng.gauss(0, 0.1) for _ in range(12)]
    widths = [run_level_half_width(ratios[:n], 0.95) for n in (3, 6, 12)]
    assert widths[0] > widths[1] > widths[2] > 0


def test_a_wide_within_noise_band_is_undecided_and_a_narrow_one_is_not():
    assert band_log_width(WIDE) == pytest.approx(math.log(1.25 / 0.79))
    assert undecided(WIDE)
    assert band_log_width(NARROW) < NARROW_LOG_WIDTH
    assert not undecided(NARROW)
    assert not undecided(result("accepted", "faster: 1.40x ± 0.05", 1.4, 0.05))
    assert not undecided(result("rejected", "slower: 0.70x ± 0.05", 0.7, 0.05))
    assert not undecided(result("rejected", "not applied: x", 1.2, 0.5))


def test_stopping_rule_in_order():
    def why(res, rounds=2, spent=0.0, next_round=10.0, policy=POLICY):
        return stop_reason(
            res, rounds=rounds, policy=policy, spent_s=spent, next_round_s=next_round
        )

    assert why(WIDE) is None  # undecided, rounds and time left: one more round
    assert why(result("accepted", "faster: 1.40x ± 0.05", 1.4, 0.05), rounds=4) == (
        "decided after 4 rounds"
    )
    assert why(NARROW, rounds=3).startswith("band narrower than ±5% after 3 rounds")
    assert why(WIDE, rounds=6) == ("still undecided after 6 rounds: --max-rounds 6 reached")
    assert why(WIDE, rounds=4, spent=85.0, next_round=20.0).startswith(
        "still undecided after 4 rounds: another round (~20s) would overrun the 100s budget"
    )
    no_limit = RoundsPolicy(planned_rounds=2, max_rounds=6, budget_s=None)
    assert why(WIDE, rounds=4, spent=1e6, policy=no_limit) is None


def test_extra_looks_share_one_error_budget():
    assert RoundsPolicy(2, 6, None).max_extra_looks == 4
    assert RoundsPolicy(2, 2, None).max_extra_looks == 0
    assert RoundsPolicy(3, 2, None).max_extra_looks == 0
    assert extended_confidence(4) == pytest.approx(1 - 0.05 / 4)
    assert extended_confidence(0) == pytest.approx(0.95)


# --------------------------------------------------------------------------- run samples


def runs(label: str, medians: list[float], seed: int) -> list[RunSample]:
    rng = random.Random(seed)
    out = []
    for median in medians:
        steps = tuple(median * (1 + rng.uniform(-0.02, 0.02)) for _ in range(20))
        out.append(
            RunSample(
                label=label,
                step_ms=steps,
                applied=(AppliedOptimization(IDS[0], True, True, "done"),),
            )
        )
    return out


# A neighbour job slowed round 2 (both of its runs) by half: the planned band, widened by the
# half-range of the two baseline medians, cannot tell a steady 1.3x gain from noise.
DISTURBED = [100.0, 200.0, 103.0, 98.0, 101.0, 99.0]


def test_more_rounds_decide_a_real_gain_the_planned_band_calls_noise():
    base = runs("baseline", DISTURBED, seed=1)
    var = runs("v", [m / 1.3 for m in DISTURBED], seed=2)
    planned = compare_variant(base[:2], var[:2], IDS)
    assert planned.verdict == "undecided" and undecided(planned), planned.reason
    extended = compare_variant(
        base,
        var,
        IDS,
        run_level_confidence=extended_confidence(4),
        rounds_note="decided after 6 rounds",
    )
    assert extended.verdict == "accepted", extended.reason
    assert extended.speedup == pytest.approx(1.3, rel=0.03)
    assert extended.reason.endswith("decided after 6 rounds")
    # The planned band only widens with more baseline runs; the run-level one narrows.
    planned_all = estimate_speedup(base, var)
    run_level = estimate_speedup(base, var, run_level_confidence=extended_confidence(4))
    assert planned_all is not None and run_level is not None
    assert run_level.log_width < planned_all.log_width


def test_no_gain_ends_within_a_narrow_band():
    base = runs("baseline", DISTURBED, seed=3)
    var = runs("v", DISTURBED, seed=4)  # no effect at all
    assert undecided(compare_variant(base[:2], var[:2], IDS))
    extended = compare_variant(base, var, IDS, run_level_confidence=extended_confidence(4))
    assert extended.verdict == "rejected"
    assert extended.reason.startswith("within noise")
    assert not undecided(extended)  # narrow: the rounds stop with "too small to matter"


def test_three_pairs_with_noisy_launches_stay_undecided():
    """Honest about few pairs: t(2) at the extra looks' confidence is wide."""
    rng = random.Random(7)
    machine = [100.0 * (1 + rng.uniform(-0.3, 0.3)) for _ in range(6)]
    base = runs("baseline", machine[:3], seed=5)
    var = runs("v", [m / 1.1 for m in machine[3:]], seed=6)
    extended = compare_variant(base, var, IDS, run_level_confidence=extended_confidence(4))
    assert undecided(extended), extended.reason
