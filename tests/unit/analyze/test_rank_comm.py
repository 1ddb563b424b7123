"""Every training process in the report: the ranks table of a run and its communication share."""

from __future__ import annotations

from pathlib import Path

from perfdoctor import rundir
from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.diagnose import analyze_session
from perfdoctor.model import StepRecord
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.summary import rank_rows

from .run_dir_builder import build_run_dir, rewrite_json


def write_rank(run: Path, rank: int, comm_ms: float | None, node: int = 0) -> None:
    path = rundir.rank_dir(run, rank)
    path.mkdir(parents=True)
    process = {"rank": rank, "node_rank": node, "host": f"host{node}", "pid": 100 + rank}
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, {"process": process})
    steps = [
        StepRecord(index=i, phase="timed", wall_ms=wall, comm_ms=comm_ms)
        for i, wall in enumerate((100.0, 100.0, 100.0))
    ]
    rundir.append_jsonl(path / rundir.STEPS_FILE, steps)


def test_each_rank_has_its_communication_share_in_facts_and_table(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    lead = {"rank": 0, "node_rank": 0, "host": "host0", "pid": 99}
    rewrite_json(run / rundir.OBSERVATIONS_FILE, process=lead)
    write_rank(run, 1, comm_ms=60.0, node=1)
    write_rank(run, 2, comm_ms=20.0, node=1)
    facts = derive_facts(load_run(run))
    assert facts.get("comm_step_frac") is None  # the hand-built lead recorded no comm_ms
    assert facts.get("rank_comm_frac_max") == 0.6 and facts.get("rank_comm_frac_max_rank") == 1
    assert facts.get("rank_comm_frac_min") == 0.2

    report = analyze_session(run)
    assert [r.rank for r in report.ranks] == [0, 1, 2]
    assert [r.comm_frac for r in report.ranks] == [None, 0.6, 0.2]
    assert [r.own_ms_p50 for r in report.ranks[1:]] == [40.0, 80.0]
    assert report.ranks[1].worker == "node 1, host1 pid 101"
    rows = rank_rows(report)
    assert rows[1][-1] == "60.0%" and rows[2][-1] == "20.0%"
    text = render_markdown(report)
    assert "## Ranks" in text and "node 1, host1 pid 101" in text
    assert "timed steps of each training process" in text


def test_a_run_of_one_process_has_no_ranks_table(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    report = analyze_session(run)
    assert report.ranks == ()
    assert derive_facts(load_run(run)).get("rank_comm_frac_max") is None
