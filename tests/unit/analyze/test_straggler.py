"""One straggler for the ranks table and the rank-straggler rule (analyze/straggler.py).

They used to judge by different figures: the table by the step less the collective time,
the rule by the wall time outside forward and backward. A rank slow in its forward (the
others wait for it in the all-reduce, which runs in their backward) was the table's
straggler and not the rule's, which named the rank that waited.
"""

from __future__ import annotations

from pathlib import Path

from perfdoctor import rundir
from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.straggler import straggler_and_fastest
from perfdoctor.diagnose import analyze_session
from perfdoctor.model import StepRecord
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.summary import rank_rows, rank_spread_text, ranks_title

from .run_dir_builder import build_run_dir, rewrite_json

WALLS = (100.0, 104.0, 98.0, 102.0)  # lockstep: both ranks' steps last as long
DIST = {"initialized": True, "backend": "gloo", "world_size": 2, "rank": 0}


def steps(*, forward: float, backward: float, comm: float | None) -> list[StepRecord]:
    return [
        StepRecord(
            index=i + 2,
            phase="timed",
            wall_ms=wall,
            data_wait_ms=5.0,
            forward_ms=forward,
            backward_ms=backward,
            comm_ms=comm,
        )
        for i, wall in enumerate(WALLS)
    ]


def two_ranks(tmp_path: Path, lead: list[StepRecord], other: list[StepRecord]) -> Path:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DIST)
    (run / rundir.STEPS_FILE).unlink()
    rundir.append_jsonl(run / rundir.STEPS_FILE, lead)
    path = rundir.rank_dir(run, 1)
    path.mkdir(parents=True)
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, {"dist": {**DIST, "rank": 1}})
    rundir.append_jsonl(path / rundir.STEPS_FILE, other)
    return run


def test_a_rank_slow_in_its_forward_is_the_straggler_in_the_rule_and_the_table(
    tmp_path: Path,
) -> None:
    # Rank 1's forward takes 50 ms against rank 0's 10 ms. Rank 0 waits 40 ms for it in the
    # all-reduce inside its backward (70 ms, 45 ms of it in the collective; 5 ms transfer).
    # Outside forward and backward rank 0 has 21 ms and rank 1 16 ms (the old rule's figure,
    # which named rank 0); the step less the collective time is 56 ms and 96 ms.
    lead = steps(forward=10.0, backward=70.0, comm=45.0)
    other = steps(forward=50.0, backward=35.0, comm=5.0)
    run = two_ranks(tmp_path, lead, other)
    facts = derive_facts(load_run(run))
    assert facts.get("straggler_rank") == 1 and facts.get("fastest_rank") == 0
    assert facts.get("straggler_own_basis") == "step_less_comm"
    assert facts.get("straggler_own_ms_p50") == 96.0
    assert facts.get("fastest_rank_own_ms_p50") == 56.0
    assert facts.get("straggler_excess_ms") == 40.0

    report = analyze_session(run)
    finding = next(f for f in report.findings if f.rule_id == "rank-straggler")
    assert finding.title.startswith("Rank 1 is a straggler: every rank waits 40.0 ms")
    # Its forward is the whole excess: the machine is named, not the script's own code.
    assert "What differs on rank 1 is its compute" in finding.explanation
    assert finding.optimizations == ()
    named = next(e for e in finding.evidence if e.name == "straggler_rank")
    assert named.value == 1 and "the rank the others wait for" in named.note
    # The table marks the same rank, with the figure the rule judged by.
    assert [row[0] for row in rank_rows(report)] == ["0", "1 (straggler)"]
    assert [r.own_ms_p50 for r in report.ranks] == [56.0, 96.0]
    assert "Straggler (the rank the others wait for" in rank_spread_text(report)
    assert "its step less its time in collectives): rank 1" in rank_spread_text(report)
    assert "rank-straggler finding judges by the same figure" in render_markdown(report)


def test_without_collective_time_both_judge_outside_forward_and_backward(
    tmp_path: Path,
) -> None:
    # A run recorded before comm_ms: rank 1 spends 40 ms more outside forward and backward
    # (its data path), rank 0 waits for it in its backward. The table's own column was the
    # whole step on both ranks (lockstep), which marked rank 0 against the rule's rank 1.
    lead = steps(forward=10.0, backward=70.0, comm=None)
    other = steps(forward=10.0, backward=30.0, comm=None)
    run = two_ranks(tmp_path, lead, other)
    report = analyze_session(run)
    assert report.facts.get("straggler_rank") == 1
    assert [row[0] for row in rank_rows(report)] == ["0", "1 (straggler)"]
    assert report.facts.get("straggler_own_basis") == "outside_forward_backward"
    assert [r.own_ms_p50 for r in report.ranks] == [21.0, 61.0]
    assert "its wall time outside forward and backward): rank 1" in rank_spread_text(report)
    assert "No process recorded its collective time" in render_markdown(report)
    finding = next(f for f in report.findings if f.rule_id == "rank-straggler")
    assert "outside forward and backward: no collective time was recorded" in finding.explanation


def test_ranks_in_balance_mark_the_most_own_work_without_calling_it_a_straggler(
    tmp_path: Path,
) -> None:
    # Own work 56 ms and 58 ms: 2% of the step, under the rule's 10%.
    lead = steps(forward=10.0, backward=70.0, comm=45.0)
    other = steps(forward=10.0, backward=70.0, comm=43.0)
    report = analyze_session(two_ranks(tmp_path, lead, other))
    assert report.facts.get("straggler_rank") == 1
    assert "rank-straggler" not in [f.rule_id for f in report.findings]
    assert [row[0] for row in rank_rows(report)] == ["0", "1 (most own work)"]
    assert "Straggler" not in rank_spread_text(report)
    assert "Most own work per step (its step less its time in collectives;" in (
        rank_spread_text(report)
    )


def test_the_straggler_is_the_first_of_equals_and_needs_two_ranks() -> None:
    assert straggler_and_fastest([(0, 5.0), (1, 9.0), (2, 9.0), (3, 1.0)]) == (1, 3)
    assert straggler_and_fastest([(0, 5.0), (1, None)]) is None
    assert straggler_and_fastest([(0, 5.0), (1, 5.0)]) == (0, 0)


def test_processes_without_a_process_group_are_not_called_ranks(tmp_path: Path) -> None:
    # Hogwild trainers: two training processes and no process group, so no process is a rank
    # and nobody waits for anybody.
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    hogwild = {"kind": "multiprocessing-fork", "rank": None, "shared_model": True}
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=None, process={**hogwild, "pid": 10})
    (run / rundir.STEPS_FILE).unlink()
    rundir.append_jsonl(run / rundir.STEPS_FILE, steps(forward=10.0, backward=70.0, comm=None))
    path = rundir.rank_dir(run, 1)
    path.mkdir(parents=True)
    rundir.write_json(
        path / rundir.OBSERVATIONS_FILE, {"dist": None, "process": {**hogwild, "pid": 11}}
    )
    rundir.append_jsonl(path / rundir.STEPS_FILE, steps(forward=10.0, backward=60.0, comm=None))
    report = analyze_session(run)
    assert len(report.ranks) == 2 and all(r.rank is None for r in report.ranks)
    assert ranks_title(report) == "Training processes"
    spread = rank_spread_text(report)
    assert spread.startswith("Step time p50 across 2 processes")
    assert "median other process" in spread and "rank" not in spread.split("(")[0]
    markdown = render_markdown(report)
    assert "## Training processes" in markdown and "## Ranks" not in markdown
