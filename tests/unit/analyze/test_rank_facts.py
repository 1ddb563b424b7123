"""Multi-rank runs offline: ranks/<k>/ records -> facts, the straggler rule, report text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor import rundir
from perfdoctor.analyze.facts import _recorded_comm_split, derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.samples import summarize_samples
from perfdoctor.diagnose import analyze_session
from perfdoctor.model import StepRecord
from perfdoctor.render.summary import device_text, world_text
from perfdoctor.rules import evaluate
from perfdoctor.run_schema import known_sample

from .run_dir_builder import OBSERVATIONS, build_run_dir, rewrite_json

# Rank 0 of the hand-built run: timed steps of 100/110/120/200 ms with 30 ms forward and
# 40 ms backward, so its own host time (outside forward and backward) is 30..130 ms, median
# 45 ms; its data wait is 10 ms.
DDP_OBSERVATIONS = {
    **OBSERVATIONS,
    "dist": {"initialized": True, "backend": "gloo", "world_size": 2, "rank": 0},
}


def add_rank(run: Path, rank: int, *, data_wait_ms: float, initialized: bool = True) -> Path:
    """Rank `rank` in lockstep with rank 0 (same step times) but with its own data wait."""
    path = rundir.rank_dir(run, rank)
    path.mkdir(parents=True)
    dist = {"initialized": initialized, "backend": "gloo" if initialized else None}
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, {"dist": dist, "steps_seen": 7})
    steps = [
        StepRecord(
            index=i + 2,
            phase="timed",
            wall_ms=wall,
            data_wait_ms=data_wait_ms,
            forward_ms=1.0,
            backward_ms=wall - data_wait_ms - 2.0,  # what is left is its wait in all-reduce
            optimizer_ms=0.5,
        )
        for i, wall in enumerate((100.0, 110.0, 120.0, 200.0))
    ]
    rundir.append_jsonl(path / rundir.STEPS_FILE, steps)
    return path


def test_single_rank_runs_have_one_rank_and_no_rank_facts(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    record = load_run(run)
    assert record.ranks == () and record.ranks_launched == 1
    facts = derive_facts(record)
    assert facts.get("ranks_launched") == 1
    assert facts.get("straggler_rank") is None and facts.get("straggler_excess_frac") is None
    skipped = {s.rule_id: s.reason for s in evaluate(facts).skipped}
    assert skipped["rank-straggler"].startswith("applies to multi-rank runs")


def test_a_rank_slow_in_its_data_path_is_the_straggler(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"])
    add_rank(run, 1, data_wait_ms=90.0)
    record = load_run(run)
    assert [r.rank for r in record.ranks] == [1] and record.ranks_launched == 2
    facts = derive_facts(record)
    assert facts.get("ranks_launched") == 2
    assert facts.get("world_size") == 2
    assert facts.get("straggler_rank") == 1 and facts.get("fastest_rank") == 0
    # rank 1's own time: wall - forward - backward = data wait + 1 ms, median 91 ms
    assert facts.get("straggler_own_ms_p50") == 91.0
    assert facts.get("fastest_rank_own_ms_p50") == 45.0
    assert facts.get("straggler_excess_ms") == 46.0
    assert facts.get("straggler_excess_frac") == 46.0 / 115.0  # the ranks' median step
    assert facts.get("straggler_data_wait_ms_p50") == 90.0
    assert facts.get("fastest_rank_data_wait_ms_p50") == 10.0
    assert facts.get("fastest_rank_backward_ms_p50") == 40.0
    assert facts.get("rank_step_ms_p50_spread_frac") == 0.0  # lockstep
    finding = next(f for f in evaluate(facts).findings if f.rule_id == "rank-straggler")
    assert finding.severity == "critical"
    assert finding.title.startswith("Rank 1 is a straggler")
    assert "data loading" in finding.explanation
    assert finding.optimizations == ("dataloader-workers", "faster-data-pipeline")


def test_a_straggler_on_another_node_is_named_with_its_node(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    lead = {"rank": 0, "node_rank": 0, "kind": "torchrun"}
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"], process=lead)
    other = add_rank(run, 1, data_wait_ms=90.0)
    rewrite_json(other / rundir.OBSERVATIONS_FILE, process={"rank": 1, "node_rank": 1})
    facts = derive_facts(load_run(run))
    assert facts.get("straggler_rank") == 1 and facts.get("straggler_node_rank") == 1
    finding = next(f for f in evaluate(facts).findings if f.rule_id == "rank-straggler")
    assert finding.title.startswith("Rank 1 (node 1) is a straggler")


def test_ranks_doing_the_same_work_have_no_straggler(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    add_rank(run, 1, data_wait_ms=44.0)  # own 45 ms, as rank 0
    facts = derive_facts(load_run(run))
    assert facts.get("straggler_excess_frac") is not None
    assert facts.get("straggler_excess_frac") < 0.10
    assert [f for f in evaluate(facts).findings if f.rule_id == "rank-straggler"] == []


def test_report_shows_world_size_and_warns_without_a_process_group(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"])
    add_rank(run, 1, data_wait_ms=10.0)
    report = analyze_session(run)
    assert world_text(report) == "world size 2 (2 ranks, gloo)"
    assert device_text(report).endswith("; world size 2 (2 ranks, gloo)")
    assert not any("process group" in w for w in report.warnings)

    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist={"initialized": False, "world_size": 1})
    report = analyze_session(run)
    assert world_text(report) == "2 training processes, no process group"
    assert any("never initialised a process group" in w for w in report.warnings)


def test_single_process_device_line_is_unchanged(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    report = analyze_session(run)
    assert world_text(report) == ""
    assert "world size" not in device_text(report)
    # A world the script joined outside perfdoctor's ranks is still shown.
    joined = replace(report, facts={**report.facts, "world_size": 4, "dist_backend": "nccl"})
    assert world_text(joined) == "world size 4 (nccl)"


def test_other_ranks_cpu_is_not_counted_as_other_processes() -> None:
    rows = [
        {
            "kind": "cpu",
            "t": 1.0,
            "cpu_percent": [100.0, 100.0],
            "child_cpu_percent": 95.0,
            "ranks": 1,
            "ranks_cpu_percent": 98.0,
        }
    ]
    summary = summarize_samples([known_sample(r) for r in rows], None, 1)  # type: ignore[misc]
    assert summary.other_busy_cores is not None and summary.other_busy_cores < 0.1


def add_rank_with_own_work(run: Path, rank: int, *, own_code_ms: float) -> Path:
    """A rank in lockstep with rank 0 whose own code (outside data, forward and backward)
    takes own_code_ms per step: a sleep or rank-only logging between two all-reduces."""
    path = rundir.rank_dir(run, rank)
    path.mkdir(parents=True)
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, {"dist": {"initialized": True}})
    steps = [
        StepRecord(
            index=i + 2,
            phase="timed",
            wall_ms=wall,
            data_wait_ms=10.0,
            forward_ms=1.0,
            backward_ms=wall - 1.0 - 10.0 - own_code_ms,
        )
        for i, wall in enumerate((100.0, 110.0, 120.0, 200.0))
    ]
    rundir.append_jsonl(path / rundir.STEPS_FILE, steps)
    return path


def test_rank_0s_wait_for_the_straggler_is_split_from_the_transfer(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=True, with_memory=False)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"])
    add_rank_with_own_work(run, 1, own_code_ms=80.0)
    record = load_run(run)
    assert record.trace is not None
    # Rank 0's own time is 30/40/50/130 ms, rank 1's 90 ms every step: rank 0 waits
    # 60/50/40/0 ms for it in the all-reduce, 45 ms at the median.
    facts = derive_facts(record)
    assert facts.get("comm_peer_wait_ms_p50") == 45.0
    # The traced collective time: half of a 100 ms step, of which 45 ms is that wait.
    traced = replace(record, trace=replace(record.trace, comm_frac=0.5, step_ms_p50=100.0))
    facts = derive_facts(traced)
    assert facts.get("comm_peer_wait_frac") == pytest.approx(0.45)
    assert facts.get("comm_transfer_frac") == pytest.approx(0.05)
    found = {f.rule_id: f for f in evaluate(facts).findings}
    assert "communication-heavy" not in found  # 5% transfer; it said 50% before
    straggler = found["rank-straggler"]
    assert straggler.optimizations == ("balance-rank-work",)
    assert "What differs on rank 1 is its own code" in straggler.explanation


def test_a_wait_shorter_than_the_collective_leaves_the_rest_as_transfer(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=True, with_memory=False)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"])
    add_rank_with_own_work(run, 1, own_code_ms=80.0)
    record = load_run(run)
    assert record.trace is not None
    # Only 20 ms of collective time traced: all of it is waiting, none transfer.
    traced = replace(record, trace=replace(record.trace, comm_frac=0.2, step_ms_p50=100.0))
    facts = derive_facts(traced)
    assert facts.get("comm_peer_wait_frac") == pytest.approx(0.2)
    assert facts.get("comm_transfer_frac") == 0.0


def test_under_ddp_the_transfer_is_bounded_by_the_smallest_timed_backward(
    tmp_path: Path,
) -> None:
    # The profiled steps of a multi-rank run inflate the collectives; DDP all-reduces inside
    # backward, so no rank's transfer exceeds the smallest timed backward over the ranks.
    run = build_run_dir(tmp_path, with_trace=True, with_memory=False)
    roots = [{**root, "ddp": True} for root in OBSERVATIONS["roots"]]
    rewrite_json(run / rundir.OBSERVATIONS_FILE, dist=DDP_OBSERVATIONS["dist"], roots=roots)
    add_rank_with_own_work(run, 1, own_code_ms=80.0)  # backwards of 9/19/29/109 ms
    record = load_run(run)
    assert record.trace is not None
    traced = replace(record, trace=replace(record.trace, comm_frac=0.9, step_ms_p50=100.0))
    facts = derive_facts(traced)
    assert facts.get("uses_ddp") is True
    # Trace: 90 ms of collectives less the 45 ms wait; rank 1's smallest backward, 9 ms of
    # rank 0's 115 ms median step, bounds it.
    assert facts.get("comm_transfer_frac") == pytest.approx(9.0 / 115.0)


def test_recorded_collective_times_split_the_wait_from_the_transfer() -> None:
    # Runs that record each step's collective time (steps.jsonl comm_ms): rank 0 spends
    # 22/25/21 ms in the collectives, rank 1 (which arrives last) 2/3/1 ms.
    def rank(comm: tuple[float, ...]) -> list[SimpleNamespace]:
        return [SimpleNamespace(index=i, comm_ms=c) for i, c in enumerate(comm)]

    split = _recorded_comm_split(rank((22.0, 25.0, 21.0)), [rank((2.0, 3.0, 1.0))])
    assert split == (20.0, 2.0)
    # A step only one rank recorded says nothing about the other's arrival.
    assert _recorded_comm_split(rank((22.0,)), [[]]) is None
    # Without the field (runs recorded before it) there is nothing to split.
    bare = [SimpleNamespace(index=0)]
    assert _recorded_comm_split(bare, [bare]) is None
