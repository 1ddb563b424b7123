"""optimize/engine.py and its in-process source: statistic choice, pooling across processes,
the stopping rule over pooled pairs, and the verdict words, on synthetic observations."""

from __future__ import annotations

import math
import random

import pytest

from perfdoctor.optimize.engine import (
    ALPHA,
    MIN_PAIRS,
    PAIRED_MEDIANS,
    THROUGHPUT_WINDOWS,
    WINDOW_MAX_STEPS,
    WINDOW_MIN_STEPS,
    Basis,
    Looks,
    block_steps_for,
    block_steps_to_fit,
    choose_statistic,
    estimate,
    verdict_words,
    window_value,
)
from perfdoctor.optimize.inprocess import (
    SCRIPT_ENDED,
    ABDesign,
    ABLog,
    Arm,
    Block,
    Comparison,
    ComparisonEnd,
    StoppingState,
    pool,
    pooled_estimate,
    prior_pairs,
)

DESIGN = ABDesign(
    arms=(Arm("baseline"), Arm("fix", ("fix",))), comparisons=(Comparison("fix", 0, 1),)
)


def _process_log(
    ratios: list[float], *, design: ABDesign = DESIGN, seed: int = 0, ended: str = SCRIPT_ENDED
) -> ABLog:
    """One A/B child that ended with the script: round 1 is every arm's first block, then
    one paired round per ratio."""
    rng = random.Random(seed)
    blocks = []
    for r, ratio in enumerate([1.0, *ratios], start=1):
        base = 3.0 * rng.uniform(0.8, 1.2)
        for arm, ms in ((0, base), (1, base / ratio)):
            steps = tuple(ms * math.exp(rng.gauss(0, 0.01)) for _ in range(4))
            blocks.append(Block(r, arm, 0, steps, settle=1, arm_warmup=r == 1))
    rounds = len(ratios) + 1
    return ABLog(
        design=design,
        block_steps=3,
        rounds=rounds,
        measure_s=0.1 * len(ratios),
        stop_reason="the script ended first",
        comparisons=(ComparisonEnd("fix", ended=ended, rounds=rounds),),
        blocks=tuple(blocks),
    )


# --------------------------------------------------------------------------- statistic


def test_bursty_steps_take_throughput_windows_and_steady_ones_paired_medians() -> None:
    steady = [3.0 + 0.05 * (i % 3) for i in range(40)]
    # A prefetching loader: three quick batches, then one long wait (p90/p50 ~ 5x).
    bursty = [2.0, 2.1, 2.0, 17.0] * 10
    assert choose_statistic(steady).name == PAIRED_MEDIANS
    choice = choose_statistic(bursty)
    assert choice.name == THROUGHPUT_WINDOWS and "p90/p50" in choice.why
    # A DataLoader fix makes the steps bursty whatever the baseline's are.
    assert choose_statistic(steady, prefetching=True).name == THROUGHPUT_WINDOWS
    assert choose_statistic([3.0, 3.0]).name == PAIRED_MEDIANS  # too few steps to tell


def test_a_window_counts_the_waits_a_median_leaves_out() -> None:
    steps = [2.0, 2.0, 2.0, 14.0] * 4
    assert window_value(steps, PAIRED_MEDIANS) == pytest.approx(2.0)
    assert window_value(steps, THROUGHPUT_WINDOWS) == pytest.approx(5.0)
    assert window_value([], THROUGHPUT_WINDOWS) is None


def test_a_bursty_loader_decides_by_windows_where_medians_see_no_gain() -> None:
    """Baseline: every batch loaded in-process (17 ms) before 3 ms of compute. With workers:
    most batches are ready (3 ms), every 4th waits for the workers (12 ms): 5.25 ms per
    step against 20, while the median step of the fix is 3 ms... and that of a block
    whose window holds the waits is what the script's clock sees."""
    rng = random.Random(5)
    base_blocks = [[20.0 * rng.uniform(0.95, 1.05) for _ in range(8)] for _ in range(12)]
    fix_blocks = [[3.0, 3.0, 3.0, 12.0] * 2 for _ in range(12)]
    windows = [
        (window_value(b, THROUGHPUT_WINDOWS), window_value(f, THROUGHPUT_WINDOWS))
        for b, f in zip(base_blocks, fix_blocks, strict=True)
    ]
    est = estimate(windows, Looks(200).confidence)
    assert est is not None and est.decision == "faster"
    assert est.speedup == pytest.approx(20.0 / 5.25, rel=0.05)


def test_block_sizes_follow_the_statistic_and_fit_a_short_script() -> None:
    assert block_steps_for(0.003) == 10
    # A window spans WINDOW_MIN_S (20 ms steps: 25 of them), within its step bounds.
    assert block_steps_for(0.020, THROUGHPUT_WINDOWS) == 25
    assert block_steps_for(0.003, THROUGHPUT_WINDOWS) == WINDOW_MAX_STEPS
    assert block_steps_for(1.0, THROUGHPUT_WINDOWS) == WINDOW_MIN_STEPS
    # 100 steps, 5 warm-up, 2 arms, 1 settling step, 6 rounds wanted: 6 counted steps.
    assert block_steps_to_fit(100, 5, 2, 1, 6, PAIRED_MEDIANS) == 5
    # A window keeps its floor; a script too short for one block of each arm gets none.
    assert block_steps_to_fit(100, 5, 2, 1, 6, THROUGHPUT_WINDOWS) == WINDOW_MIN_STEPS
    assert block_steps_to_fit(12, 5, 2, 1, 6, PAIRED_MEDIANS) is None
    # Arms that need no first block (optimize/switchable.py) leave their steps to rounds.
    assert block_steps_to_fit(100, 5, 2, 1, 6, PAIRED_MEDIANS, warmup_arms=0) == 6
    assert block_steps_to_fit(40, 5, 2, 3, 6, THROUGHPUT_WINDOWS) is None
    assert block_steps_to_fit(40, 5, 2, 3, 6, THROUGHPUT_WINDOWS, warmup_arms=0) == 8


# --------------------------------------------------------------------------- pooling


def test_pairs_of_several_processes_pool_in_order() -> None:
    logs = [_process_log([2.0] * 4, seed=s) for s in range(3)]
    pooled = pool(logs, "fix")
    assert pooled is not None
    assert len(pooled.pairs) == 12 and pooled.processes == 3
    assert [p.process for p in pooled.pairs] == [0] * 4 + [1] * 4 + [2] * 4
    assert pooled.measure_s == pytest.approx(1.2)
    assert pooled.steps_per_pair == 2 * (3 + 1)
    est = pooled_estimate(pooled)
    assert est is not None and est.decision == "faster"
    assert est.speedup == pytest.approx(2.0, rel=0.05)
    # One process alone had too few pairs for a look.
    one = pooled_estimate(pool(logs[:1], "fix"))  # type: ignore[arg-type]
    assert one is not None and one.pairs == 4


def test_a_process_counts_only_the_rounds_up_to_where_it_ended_the_comparison() -> None:
    log = _process_log([2.0] * 6)
    ended_early = ABLog(
        design=log.design,
        block_steps=log.block_steps,
        rounds=log.rounds,
        comparisons=(ComparisonEnd("fix", ended="faster", rounds=4),),
        blocks=log.blocks,
    )
    pooled = pool([ended_early], "fix")
    assert pooled is not None and len(pooled.pairs) == 3 and pooled.ended == "faster"


def test_a_continuation_looks_at_the_pooled_count_and_decides() -> None:
    """The first process ended after 4 pairs, the second after 4: no look yet (the first is
    at 9 pairs). The third process starts from the 8 pooled pairs, and its first pair makes
    the first look, which decides a clear gain."""
    logs = [_process_log([2.0] * 4, seed=s) for s in range(2)]
    prior = prior_pairs(logs)
    assert len(prior["fix"]) == 8
    state = StoppingState(DESIGN, prior=prior, prior_measure_s=30.0)
    third = _process_log([2.0], seed=9)
    state.after_round(2, third.blocks, measure_s=0.1)
    assert not state.open
    assert state.states[0].ended == "faster"
    assert state.states[0].estimate is not None and state.states[0].estimate.pairs == 9


def test_the_end_of_a_script_takes_no_look_so_the_error_budget_holds() -> None:
    state = StoppingState(DESIGN)
    log = _process_log([2.0] * 5)
    state.close_all(6, log.blocks, SCRIPT_ENDED)
    only = state.states[0]
    assert only.ended == SCRIPT_ENDED and only.looks_taken == 0
    assert only.estimate is not None  # shown on the live display, not decided


def test_pooled_a_a_false_verdicts_stay_within_alpha() -> None:
    """A/A over processes of 4 pairs each, heavy-tailed noise with load spikes: the rate of
    "faster" or "slower" over every look (pooled counts) and the last one stays within
    ALPHA."""
    rng = random.Random(11)
    looks = Looks(200)
    false, trials = 0, 300
    for _ in range(trials):
        pairs: list[tuple[float, float]] = []
        decided = None
        for _process in range(15):
            for _ in range(4):
                base = rng.lognormvariate(1, 0.5)
                a, b = (
                    base * rng.lognormvariate(0, 0.3) * (4 if rng.random() < 0.1 else 1)
                    for _ in range(2)
                )
                pairs.append((a, b))
                if looks.due(len(pairs)):
                    est = estimate(pairs, looks.confidence)
                    if est is not None and est.decision != "undecided":
                        decided = est.decision
                        break
            if decided:
                break
        if decided is None:
            est = estimate(pairs, looks.confidence)  # the last look
            decided = est.decision if est is not None else None
        false += decided in ("faster", "slower")
    assert false / trials <= ALPHA


# --------------------------------------------------------------------------- verdict words


def test_verdict_words_never_say_rejected_for_could_not_tell() -> None:
    basis = Basis(steps_per_pair=8, load="1.5 other busy cores of 2", busy=True)
    faster = estimate([(20.0 * (1 + 0.01 * i), 10.0) for i in range(10)], 0.99)
    slower = estimate([(10.0, 20.0 * (1 + 0.01 * i)) for i in range(10)], 0.99)
    same = estimate([(10.0 * (1 + 0.001 * (-1) ** i), 10.0) for i in range(10)], 0.99)
    wide = estimate([(10.0, 10.0 * f) for f in (0.5, 2.0, 0.7, 1.6, 0.9, 1.3)], 0.99)
    assert verdict_words(faster, basis)[0] == "accepted"
    verdict, reason = verdict_words(faster, basis)
    assert reason.endswith("at 1.5 other busy cores of 2")
    assert verdict_words(slower, basis)[0] == "rejected"
    assert verdict_words(same, basis)[0] == "rejected"
    assert "no gain" in verdict_words(same, basis)[1]
    verdict, reason = verdict_words(wide, basis)
    assert verdict == "undecided" and "would decide it" in reason
    verdict, reason = verdict_words(None, Basis(steps_per_pair=8))
    assert verdict == "undecided"
    assert f"fewer than {MIN_PAIRS} pairs" in reason and "more steps" in reason


def test_what_would_decide_is_more_steps_or_a_quieter_machine() -> None:
    # A 10% gain measured with a +-30% interval on 9 pairs: about 9 x 3^2 = 81 pairs.
    rng = random.Random(2)
    pairs = [(10.0 * math.exp(rng.gauss(0.1, 0.35)), 10.0) for _ in range(9)]
    est = estimate(pairs, 0.99)
    assert est is not None and est.decision == "undecided"
    quiet = verdict_words(est, Basis(steps_per_pair=10))[1]
    assert "more steps" in quiet and "quieter" not in quiet
    # Far more pairs than measured, on a busy machine: the load is what hides it.
    factors = (0.4, 2.5, 0.5, 2.0, 0.6, 1.7, 0.8, 1.3, 1.02)
    noisy = [(10.0 * f, 10.0) for f in factors]
    est = estimate(noisy, 0.99)
    assert est is not None and est.decision == "undecided"
    busy = verdict_words(est, Basis(steps_per_pair=10, busy=True))[1]
    assert "a quieter machine" in busy


def test_long_blocks_are_looked_at_from_three_pairs_like_whole_runs() -> None:
    """The README demo's steps (0.29 s) make 8-step blocks of 2.3 s: looked at from 3 pairs,
    at a stricter confidence per look (more looks share ALPHA); 20 ms steps keep 9."""
    from perfdoctor.optimize.engine import (
        LONG_BLOCK_S,
        THROUGHPUT_WINDOWS,
        block_looks,
        block_steps_for,
        long_blocks,
    )

    assert long_blocks(0.287, THROUGHPUT_WINDOWS)
    assert block_steps_for(0.287, THROUGHPUT_WINDOWS) * 0.287 >= LONG_BLOCK_S
    assert not long_blocks(0.02, THROUGHPUT_WINDOWS) and not long_blocks(None, "paired-medians")
    early, usual = block_looks(200, True), block_looks(200, False)
    assert early.first_look == 3 and usual.first_look == 9
    assert early.confidence > usual.confidence  # more looks: each one stricter
    assert early.due(3) and not usual.due(3)


def test_a_design_of_long_blocks_carries_its_schedule_to_every_look() -> None:
    from perfdoctor.model import ABDesign, Arm, Comparison
    from perfdoctor.optimize.inprocess import look_confidence, looks

    arms, comparisons = (Arm("baseline"), Arm("fix", ("fix",))), (Comparison("fix", 0, 1),)
    long = ABDesign(arms=arms, comparisons=comparisons, long_blocks=True)
    short = ABDesign(arms=arms, comparisons=comparisons)
    assert looks(long)[:3] == (3, 4, 5) and looks(short)[0] == 9
    assert look_confidence(long) > look_confidence(short)
