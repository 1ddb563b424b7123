"""optimize/inprocess.py: the paired statistic, its interval and the stopping rule."""

from __future__ import annotations

import math
import random

import pytest

from perfdoctor.optimize.inprocess import (
    ALPHA,
    NARROW,
    ABDesign,
    Arm,
    Block,
    Comparison,
    StoppingState,
    arm_quartiles,
    block_steps_for,
    estimate,
    final_estimate,
    look_confidence,
    looks,
    paired_medians,
    t_quantile,
)

DESIGN = ABDesign(
    arms=(Arm("baseline"), Arm("fix", ("fix",))), comparisons=(Comparison("fix", 0, 1),)
)


@pytest.mark.parametrize(
    ("confidence", "dof", "expected"),
    [(0.95, 4, 2.7764), (0.95, 10, 2.2281), (0.99, 30, 2.7500), (0.95, 1, 12.7062)],
)
def test_t_quantile_matches_the_tables(confidence: float, dof: int, expected: float) -> None:
    assert t_quantile(confidence, dof) == pytest.approx(expected, abs=1e-3)


def test_the_shown_step_times_give_the_speedup_exactly() -> None:
    rng = random.Random(3)
    pairs = [(20.0 * rng.uniform(0.9, 1.1), 10.0 * rng.uniform(0.9, 1.1)) for _ in range(15)]
    est = estimate(pairs, 0.95)
    assert est is not None
    assert est.reference_ms / est.test_ms == pytest.approx(est.speedup, rel=1e-12)
    assert est.low < est.speedup < est.high
    assert est.decision == "faster"
    assert est.trimmed == 2 * int(0.2 * 15)


def test_a_load_spike_in_one_round_does_not_swing_the_estimate() -> None:
    pairs = [(20.0, 10.0)] * 9 + [(20.0, 400.0)]
    est = estimate([(r * (1 + 0.01 * i), t) for i, (r, t) in enumerate(pairs)], 0.95)
    assert est is not None and est.speedup == pytest.approx(2.0, rel=0.05)


def test_decisions() -> None:
    slower = estimate([(10.0, 20.0 * (1 + 0.01 * i)) for i in range(8)], 0.95)
    same = estimate([(10.0 * (1 + 0.001 * (-1) ** i), 10.0) for i in range(8)], 0.95)
    wide = estimate([(10.0, 10.0 * f) for f in (0.5, 2.0, 0.7, 1.6)], 0.95)
    assert slower is not None and slower.decision == "slower"
    assert same is not None and same.decision == "no-gain" and same.half_width_log < NARROW
    assert wide is not None and wide.decision == "undecided"
    assert estimate([(1.0, 1.0)] * 2, 0.95) is None


def test_the_looks_share_the_error_budget() -> None:
    n = len(looks(DESIGN))
    assert look_confidence(DESIGN) == pytest.approx(1 - ALPHA / (n + 1))
    assert looks(ABDesign(arms=DESIGN.arms, comparisons=DESIGN.comparisons, max_rounds=20)) == (
        9,
        13,
        19,
    )


def _blocks(ratios: list[float], *, spread: float = 0.0, seed: int = 0) -> list[Block]:
    """Round r: a warm-up block of each arm in round 1, then paired blocks."""
    rng = random.Random(seed)
    blocks = []
    for r, ratio in enumerate([1.0, *ratios], start=1):
        base = 10.0 * rng.uniform(0.5, 2.0)  # load that drifts between rounds
        for arm, ms in ((0, base), (1, base / ratio)):
            steps = tuple(ms * math.exp(rng.gauss(0, spread)) for _ in range(5))
            blocks.append(
                Block(round=r, arm=arm, first_step=0, step_ms=steps, settle=1, arm_warmup=r == 1)
            )
    return blocks


def test_paired_medians_skip_warmup_and_settling_steps() -> None:
    blocks = _blocks([2.0] * 3)
    pairs = paired_medians(blocks, DESIGN.comparisons[0])
    assert len(pairs) == 3  # round 1 is every arm's warm-up block
    assert all(r / t == pytest.approx(2.0) for r, t in pairs)
    settled = Block(round=2, arm=0, first_step=0, step_ms=(1000.0, 5.0, 5.0), settle=1)
    assert settled.counted_ms == (5.0, 5.0)


def test_drift_between_rounds_cancels_in_the_pairs() -> None:
    est = final_estimate(DESIGN, _blocks([1.5] * 8, spread=0.02), DESIGN.comparisons[0], 0)
    assert est is not None and est.speedup == pytest.approx(1.5, rel=0.03)
    assert est.decision == "faster"


def test_stopping_state_ends_a_clear_gain_at_a_look_and_keeps_rounds() -> None:
    state = StoppingState(DESIGN)
    blocks = _blocks([2.0] * 9, spread=0.01)
    state.after_round(9, blocks[:-2], measure_s=1.0)  # 8 pairs: no look
    assert state.open
    state.after_round(10, blocks, measure_s=1.0)  # 9 pairs: the first look
    assert not state.open
    assert state.states[0].ended == "faster" and state.states[0].rounds == 10


def test_a_decided_but_wide_interval_is_refined_until_narrow_or_refine_time() -> None:
    state = StoppingState(DESIGN)
    noisy = _blocks([2.0, 1.6, 2.5, 1.8, 2.2, 1.7, 2.4, 1.9, 2.1])  # 9 pairs after round 10
    state.after_round(10, noisy, measure_s=1.0)
    est = state.states[0].estimate
    assert est is not None and est.decision == "faster"
    assert est.half_width_log > math.log(1.10)
    assert state.open  # decided, but its gain not yet sized
    state.after_round(11, noisy, measure_s=30.0)  # past REFINE_S
    assert not state.open and state.states[0].ended == "faster"


def test_close_all_at_the_budget_leaves_an_undecided_comparison_undecided() -> None:
    state = StoppingState(DESIGN)
    blocks = _blocks([0.6, 1.7, 0.8, 1.5], seed=2)
    state.close_all(5, blocks, "budget")
    assert state.states[0].ended == "budget"


def test_block_steps_follow_the_warmup_step_time() -> None:
    assert block_steps_for(0.001) == 10
    assert block_steps_for(0.1) == 4
    assert block_steps_for(5.0) == 3
    assert block_steps_for(None) == 5


def test_arm_quartiles_count_only_the_rounds_of_the_comparison() -> None:
    blocks = _blocks([2.0] * 4)
    q_all = arm_quartiles(blocks, 1, 0)
    q_two = arm_quartiles(blocks, 1, 3)
    assert q_all is not None and q_two is not None
    assert q_two.steps == 2 * 4 and q_all.steps == 4 * 4


def test_a_a_false_verdicts_stay_within_alpha_on_heavy_tailed_noise() -> None:
    """Simulated A/A: both arms the same, lognormal noise with 10% of blocks hit by a 5x
    spike; the rate of "faster" or "slower" over every look must stay within ALPHA."""
    rng = random.Random(7)
    conf = look_confidence(DESIGN)
    false = 0
    trials = 400
    for _ in range(trials):
        pairs: list[tuple[float, float]] = []
        for r in range(1, 61):
            base = rng.lognormvariate(3, 0.8)
            a, b = (
                base * rng.lognormvariate(0, 0.5) * (5 if rng.random() < 0.1 else 1)
                for _ in range(2)
            )
            pairs.append((a, b))
            if r in looks(DESIGN):
                est = estimate(pairs, conf)
                if est is not None and est.decision in ("faster", "slower"):
                    false += 1
                    break
                if est is not None and est.decision == "no-gain":
                    break
    assert false / trials <= ALPHA


def test_a_comparison_outperformed_beyond_both_intervals_stops_undecided() -> None:
    """Three arms: the coupled fix 3x, the workers alone ~1.1x with noise. Once the 3x is
    accepted and sized, the 1.1x's whole interval lies below the 3x's: it cannot be the fix
    to take, so it stops (undecided) instead of spending the rest of the budget."""
    from perfdoctor.optimize.inprocess import OUTPERFORMED

    design = ABDesign(
        arms=(Arm("baseline"), Arm("w", ("w",)), Arm("w+t", ("w", "t"))),
        comparisons=(Comparison("w", 0, 1), Comparison("w+t", 0, 2)),
        long_blocks=True,
    )
    rng = random.Random(5)
    blocks = []
    for r in range(1, 8):
        base = 100.0 * rng.uniform(0.8, 1.25)
        for arm, ms in ((0, base), (1, base / rng.uniform(0.95, 1.3)), (2, base / 3.0)):
            blocks.append(Block(round=r, arm=arm, first_step=0, step_ms=(ms,) * 4, settle=1))
    state = StoppingState(design)
    for rounds in range(1, 8):
        state.after_round(rounds, blocks[: 3 * rounds], measure_s=10.0 * rounds)
        if not state.open:
            break
    ends = {s.comparison.label: s.ended for s in state.states}
    assert ends["w+t"] == "faster"
    assert ends["w"] == OUTPERFORMED + "w+t"
    loser = next(s for s in state.states if s.comparison.label == "w").estimate
    winner = next(s for s in state.states if s.comparison.label == "w+t").estimate
    assert loser is not None and winner is not None and winner.low > loser.high


def test_a_comparison_whose_interval_reaches_the_winners_keeps_measuring() -> None:
    design = ABDesign(
        arms=(Arm("baseline"), Arm("a", ("a",)), Arm("b", ("b",))),
        comparisons=(Comparison("a", 0, 1), Comparison("b", 0, 2)),
        long_blocks=True,
    )
    rng = random.Random(7)
    blocks = []
    for r in range(1, 6):
        base = 100.0 * rng.uniform(0.8, 1.25)
        for arm, ms in ((0, base), (1, base / 3.0), (2, base / rng.uniform(2.2, 3.6))):
            blocks.append(Block(round=r, arm=arm, first_step=0, step_ms=(ms,) * 4, settle=1))
    state = StoppingState(design)
    for rounds in range(1, 6):
        state.after_round(rounds, blocks[: 3 * rounds], measure_s=10.0 * rounds)
    ends = {s.comparison.label: s.ended for s in state.states}
    assert not (ends["b"] or "").startswith("outperformed")
