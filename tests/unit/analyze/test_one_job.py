"""One job, one set of numbers (issue 32): a trace that is not of the job is not joined into
it; a lone rank's file keeps its own name; a multi-rank report gives the diagnosed rank's
step and data wait in every place; Python frames are found under any category spelling."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.trace import load_trace
from perfdoctor.analyze.trace_inputs import discover
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.rules import evaluate
from perfdoctor.rules.allocator import RULES as ALLOCATOR_RULES
from tests.unit.rules.factsets import make_facts

from .gpu_corpus import corpus_dir
from .synthetic_trace import input_bound_trace, write_trace


def _cpu_gloo_rank(rank: int, world: int) -> dict[str, Any]:
    trace = input_bound_trace(rank=rank, world_size=world)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] not in ("kernel",)]
    trace["distributedInfo"]["backend"] = "gloo"
    trace.pop("deviceProperties")
    return trace


def test_a_trace_of_another_job_is_left_out_with_a_warning_and_diagnosed_alone(
    tmp_path: Path,
) -> None:
    logdir = tmp_path / "job"
    for rank in (0, 1):
        write_trace(logdir / f"node{rank}.100.pt.trace.json", input_bound_trace(rank=rank))
    write_trace(logdir / "stray_rank-34.100.pt.trace.json", _cpu_gloo_rank(34, 300))
    done = diagnose_traces([logdir], tmp_path / "out")
    assert len(done) == 2
    job, alone = done
    assert job.report is not None and alone.report is not None
    assert [r.rank for r in job.report.ranks] == [0, 1]
    assert any(
        "stray_rank-34" in w and "not of this job" in w and "world size 300" in w
        for w in job.report.warnings
    )
    assert "rank-straggler" not in [f.rule_id for f in job.report.findings]
    assert alone.report.ranks == () and "stray" in alone.run.name
    assert Path(alone.report.run_dir).parent == tmp_path / "out"


def test_ranks_recorded_a_day_apart_are_not_one_job(tmp_path: Path) -> None:
    logdir = tmp_path / "job"
    for rank, base in ((0, 1_700_000_000), (1, 1_700_000_000), (2, 1_700_090_000)):
        trace = input_bound_trace(rank=rank, world_size=3)
        trace["baseTimeNanoseconds"] = base * 10**9
        write_trace(logdir / f"node{rank}.100.pt.trace.json", trace)
    job, alone = diagnose_traces([logdir], tmp_path / "out")
    assert [r.rank for r in job.report.ranks] == [0, 1]
    assert any("h apart" in w for w in job.report.warnings)
    assert alone.report is not None


def test_a_rank_beyond_the_world_size_is_not_of_the_job(tmp_path: Path) -> None:
    logdir = tmp_path / "job"
    for rank in (0, 1, 5):
        write_trace(logdir / f"node{rank}.100.pt.trace.json", input_bound_trace(rank=rank))
    job, alone = diagnose_traces([logdir], tmp_path / "out")
    assert [r.rank for r in job.report.ranks] == [0, 1]
    assert any("rank 5 in a job of world size 2" in w for w in job.report.warnings)
    assert alone.report is not None


def test_one_rank_file_keeps_its_name(tmp_path: Path) -> None:
    write_trace(tmp_path / "in" / "llama_rank0.json", input_bound_trace(rank=0))
    (run,) = discover([tmp_path / "in"]).runs
    assert run.name == "llama_rank0"
    write_trace(tmp_path / "in" / "llama_rank1.json", input_bound_trace(rank=1))
    (run,) = discover([tmp_path / "in"]).runs
    assert run.name == "llama_ranks"


@pytest.mark.parametrize("category", ["Python Function", "PYTHON_FUNCTION", ""])
def test_python_frames_under_other_spellings_are_frames(tmp_path: Path, category: str) -> None:
    trace = input_bound_trace()
    for i in range(3):
        trace["traceEvents"].append(
            {"ph": "X", "cat": category, "name": f"train.py({10 + i}): step", "ts": 1_100.0 + i,
             "dur": 50.0, "pid": 1000, "tid": 1000,
             "args": {"Python id": 10 + i, "Python parent id": 9 + i}}
        )  # fmt: skip
    summary = load_trace(write_trace(tmp_path / "t.json", trace))
    assert summary.has_stacks and summary.python_frames == 3


def test_the_allocator_storm_text_says_no_python_frames_only_without_them() -> None:
    rule = ALLOCATOR_RULES[0]
    storm = {"alloc_call_frac": 0.4, "alloc_call_count": 400.0, "alloc_syncing_free_count": 200.0}
    with_frames = make_facts("gpu", **storm, trace_python_frames=6649)
    (finding,) = evaluate(with_frames, rules=(rule,)).findings
    assert "no Python frames" not in finding.explanation
    without = make_facts("gpu", **storm, trace_python_frames=0)
    (finding,) = evaluate(without, rules=(rule,)).findings
    assert "no Python frames" in finding.explanation


# --------------------------------------------------------------------------- corpus


def _dlrm(tmp_path: Path, stray: bool) -> Path | None:
    root = corpus_dir()
    if root is None:
        return None
    ranks = sorted((root / "traces").glob("param_dlrm_worker*.pt.trace.json.gz"))
    if len(ranks) != 8:
        return None
    folder = tmp_path / "dlrm"
    folder.mkdir()
    for path in ranks:
        shutil.copy(path, folder / path.name)
    if stray:
        (cpu,) = (root / "traces").glob("hta_cpu_only_rank-34*.json.gz")
        shutil.copy(cpu, folder / cpu.name)
    return folder


def test_dlrm_job_gives_one_step_and_one_data_wait(tmp_path: Path) -> None:
    folder = _dlrm(tmp_path, stray=False)
    if folder is None:
        pytest.skip("shared GPU corpus not found")
    (done,) = diagnose_traces([folder], tmp_path / "out")
    report = done.report
    diagnosed = report.ranks[0]  # the rank whose trace the report diagnoses comes first
    assert report.baseline.step_ms_p50 == pytest.approx(diagnosed.step_ms_p50)
    data = report.baseline.breakdown_ms["data"]
    assert report.facts["data_wait_frac"] == pytest.approx(data / diagnosed.step_ms_p50)
    # The GPU's idle time in the DataLoader cannot exceed the DataLoader's own time.
    idle_data_ms = report.facts["gpu_idle_host_data_frac"] * report.facts["gpu_window_ms"]
    assert idle_data_ms <= data * 1.001


def test_dlrm_job_with_a_stray_cpu_trace_keeps_eight_ranks(tmp_path: Path) -> None:
    folder = _dlrm(tmp_path, stray=True)
    if folder is None:
        pytest.skip("shared GPU corpus not found")
    done = diagnose_traces([folder], tmp_path / "out")
    job = done[0].report
    assert len(job.ranks) == 8 and 34 not in [r.rank for r in job.ranks]
    assert job.facts["rank_step_ms_p50_spread_frac"] < 1.0  # was 15.797 with the stray in
    assert any("hta_cpu_only_rank-34" in w for w in job.warnings)
    assert len(done) == 2 and done[1].report is not None
