"""optimize/inprocess_verdict.py: a fix measured in one process, judged from saved runs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.model import ABDesign, AppliedOptimization, Arm, Comparison
from perfdoctor.optimize.inprocess import ABLog, Block, ComparisonEnd
from perfdoctor.optimize.inprocess_verdict import compare_in_process

FIX = "anomaly-off"
ON = AppliedOptimization(id=FIX, applied=True, verified=True, detail="off")
LOSSES = tuple(2.0 * math.exp(-0.05 * i) for i in range(25))


def ab_log(ratio: float, rounds: int = 12, ended: str = "faster", *, jitter: float = 0.02) -> ABLog:
    design = ABDesign(
        arms=(Arm("baseline"), Arm(FIX, (FIX,))), comparisons=(Comparison(FIX, 0, 1),)
    )
    blocks = []
    for r in range(1, rounds + 1):
        base = 10.0 * (1 + 0.3 * math.sin(r))  # load drifting between rounds
        wobble = 1 + jitter * (-1) ** r
        blocks.append(Block(r, 0, 0, (99.0, base, base, base), 1, arm_warmup=r == 1))
        test = base / ratio * wobble
        blocks.append(Block(r, 1, 0, (99.0, test, test, test), 1, arm_warmup=r == 1))
    return ABLog(
        design=design,
        rounds=rounds,
        measure_s=4.2,
        comparisons=(ComparisonEnd(FIX, ended, rounds, 3),),
        blocks=tuple(blocks),
    )


def sample(label: str, losses=LOSSES, applied=(ON,), status: str = "completed") -> RunSample:
    return RunSample(
        label=label,
        step_ms=(10.0,) * 20,
        losses=losses,
        status=status,
        applied=applied,
        run_dir=f"/s/{label}",
        other_busy_cores=0.9,
        cpu_cores=2,
    )


BASELINE = [sample("baseline", applied=())]


def judge(log: ABLog | None, numerics=None, **kw):
    return compare_in_process(
        BASELINE,
        sample("ab"),
        log,
        numerics if numerics is not None else [sample(FIX)],
        (FIX,),
        label=FIX,
        **kw,
    )


def test_a_clear_gain_is_accepted_with_one_statistic_and_its_two_step_times() -> None:
    result = judge(ab_log(2.0))
    assert result.verdict == "accepted" and result.reason.startswith("faster: ")
    assert result.speedup == pytest.approx(2.0, rel=0.02)
    assert result.method == "in-process"
    assert result.baseline_step_ms_p50 / result.step_ms_p50 == pytest.approx(result.speedup)
    low, high = result.interval
    assert low > 1.0 and low < result.speedup < high
    assert result.pairs == 11  # the first round is every arm's warm-up
    assert result.quartiles_ms is not None and result.baseline_quartiles_ms is not None
    assert result.numerics.startswith("seeded run against the seeded baseline, tolerance")
    assert "0.9 of 2 cores" in (result.load or "")


def test_a_slower_fix_and_a_no_gain_fix_are_rejected_with_their_reason() -> None:
    assert judge(ab_log(0.5)).reason.startswith("slower: 0.50x")
    same = judge(ab_log(1.0, jitter=0.001), numerics=[])
    assert same.verdict == "rejected" and same.reason.startswith("no gain beyond ±5%")


def test_numerics_from_the_seeded_run_reject_a_drifting_loss() -> None:
    drifting = tuple(v * 1.5 for v in LOSSES)
    result = judge(ab_log(2.0), numerics=[sample(FIX, losses=drifting)])
    assert result.verdict == "rejected" and "loss" in result.reason


def test_a_refused_applier_or_a_crashed_seeded_run() -> None:
    refused = AppliedOptimization(id=FIX, applied=False, verified=False, detail="nothing to do")
    result = judge(ab_log(2.0), numerics=[sample(FIX, applied=(refused,))])
    assert result.verdict == "rejected" and result.reason.startswith("not applied")
    crashed = judge(ab_log(2.0), numerics=[sample(FIX, status="script_crashed")])
    assert crashed.verdict == "failed" and crashed.reason.startswith("seeded run")
    assert judge(None).verdict == "failed"


def test_a_comparison_the_child_ended_as_not_switchable() -> None:
    log = ab_log(2.0, ended="cannot switch: anomaly-off")
    assert judge(log).reason == "cannot switch: anomaly-off"


def test_a_peel_comparison_says_keep_or_drop() -> None:
    keep = judge(ab_log(1.5), numerics=[], peel_of=FIX, numerics_note="stack's run")
    assert keep.reason.startswith(f"keep {FIX}") and keep.peel_of == FIX
    assert keep.numerics == "stack's run"
    drop = judge(ab_log(1.0, jitter=0.001), numerics=[], peel_of=FIX)
    assert drop.reason.startswith(f"drop {FIX}: it adds nothing")
    hurts = judge(ab_log(0.7), numerics=[], peel_of=FIX)
    assert hurts.reason.startswith(f"drop {FIX}: it hurts in combination")


def test_the_measured_line_says_the_paired_medians_are_block_medians() -> None:
    from perfdoctor.render.summary import paired_text

    text = paired_text(judge(ab_log(2.0)))
    assert (
        text
        == "paired medians: geometric mean of the block medians over 11 paired blocks, one process"
    )


def test_too_few_pairs_is_undecided_with_what_would_decide_it_never_rejected() -> None:
    result = judge(ab_log(2.0, rounds=3, ended="script ended"))
    assert result.verdict == "undecided"
    assert result.reason.startswith("undecided: fewer than 3 pairs")
    assert result.would_decide and "more steps" in result.would_decide


def test_the_verdict_states_the_load_and_a_thread_cut_that_wins_by_it_is_load_bound() -> None:
    threads = AppliedOptimization(
        id="cpu-threads",
        applied=True,
        verified=True,
        detail="intra-op threads held at 1 (usable cores; 2 at startup)",
    )
    busy = RunSample(
        label="ab",
        step_ms=(10.0,) * 20,
        applied=(threads,),
        run_dir="/s/ab",
        other_busy_cores=1.5,
        cpu_cores=2,
    )
    log = ab_log(1.6)
    log = ABLog(
        design=ABDesign(
            arms=(Arm("baseline"), Arm("cpu-threads", ("cpu-threads",))),
            comparisons=(Comparison("cpu-threads", 0, 1),),
        ),
        rounds=log.rounds,
        measure_s=log.measure_s,
        comparisons=(ComparisonEnd("cpu-threads", "faster", log.rounds, 3),),
        blocks=log.blocks,
    )
    result = compare_in_process(
        BASELINE, busy, log, [sample("cpu-threads", applied=(threads,))], ("cpu-threads",),
        label="cpu-threads",
    )  # fmt: skip
    assert result.verdict == "accepted"
    assert "at 1.5 other busy cores of 2" in result.reason
    assert result.load_busy_cores == pytest.approx(1.5) and result.load_cores == 2
    assert result.load_bound and "load-bound" in result.reason
    # The same gain on a quiet machine is not load-bound.
    quiet = compare_in_process(
        BASELINE, replace(busy, other_busy_cores=0.1), log,
        [sample("cpu-threads", applied=(threads,))], ("cpu-threads",), label="cpu-threads",
    )  # fmt: skip
    assert quiet.verdict == "accepted" and not quiet.load_bound


def test_a_fix_measured_beside_a_thread_cut_in_one_process_is_not_load_bound() -> None:
    """The A/B process installs every arm's appliers: anomaly-off measured there beside a
    cpu-threads arm wins on its own, and is not labelled as winning by the load."""
    threads = AppliedOptimization(
        id="cpu-threads",
        applied=True,
        verified=True,
        detail="intra-op threads held at 1 (usable cores; 2 at startup)",
    )
    anomaly = AppliedOptimization(id="anomaly-off", applied=True, verified=True, detail="off")
    busy = RunSample(
        label="ab",
        step_ms=(10.0,) * 20,
        applied=(anomaly, threads),
        run_dir="/s/ab",
        other_busy_cores=1.5,
        cpu_cores=2,
    )
    log = ab_log(1.6)
    log = ABLog(
        design=ABDesign(
            arms=(Arm("baseline"), Arm("anomaly-off", ("anomaly-off",))),
            comparisons=(Comparison("anomaly-off", 0, 1),),
        ),
        rounds=log.rounds,
        measure_s=log.measure_s,
        comparisons=(ComparisonEnd("anomaly-off", "faster", log.rounds, 3),),
        blocks=log.blocks,
    )
    result = compare_in_process(
        BASELINE, busy, log, [sample("anomaly-off", applied=(anomaly, threads))],
        ("anomaly-off",), label="anomaly-off",
    )  # fmt: skip
    assert result.verdict == "accepted"
    assert "at 1.5 other busy cores of 2" in result.reason
    assert not result.load_bound and "load-bound" not in result.reason
