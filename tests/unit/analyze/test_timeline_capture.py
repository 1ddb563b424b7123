"""Part 4 of issue 22: a trace that lost its GPU side (or its host side) is a capture problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import summary

from .gpu_corpus import corpus_dir
from .synthetic_trace import input_bound_trace, write_trace
from .timeline_traces import gpu_only, lost_gpu_side


def _diagnose(tmp_path: Path, trace: dict) -> summary.Headline:
    path = write_trace(tmp_path / "t.json", trace)
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    return summary.headline(done.report)


def test_launches_without_gpu_activity_headline_as_lost_cupti_records(tmp_path: Path) -> None:
    head = _diagnose(tmp_path, lost_gpu_side(260))
    assert "lost its GPU side" in head.slow
    assert "260 kernel launches" in head.slow
    assert "No bottleneck" not in head.slow


def test_the_lost_gpu_side_says_how_to_record_again(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", lost_gpu_side(50))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    top = done.report.findings[0]
    assert top.rule_id == "trace-capture-incomplete"
    assert top.severity == "critical"
    for hint in ("ProfilerActivity.CUDA", "warmup", "ERR_NVGPUCTRPERM", "prof.stop()"):
        assert hint in top.explanation


def test_gpu_ops_without_any_host_record_are_named_too(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", gpu_only(40))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    ids = [f.rule_id for f in done.report.findings]
    assert "trace-capture-incomplete" in ids
    (capture,) = [f for f in done.report.findings if f.rule_id == "trace-capture-incomplete"]
    assert "no host side" in capture.title


def test_a_complete_trace_is_not_a_capture_problem(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", input_bound_trace())
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    assert "trace-capture-incomplete" not in [f.rule_id for f in done.report.findings]


CUPTI_RANGES = "hta_cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz"


def test_a_range_profiler_trace_is_named_a_counter_trace_not_a_lost_one(tmp_path: Path) -> None:
    """HTA's cupti_profiler trace: 77 launches measured by CUPTI's range profiler
    (cuda_profiler_range events) and no kernel activity at all."""
    root = corpus_dir()
    if root is None or not (root / "traces" / CUPTI_RANGES).is_file():
        pytest.skip("shared GPU corpus not found")
    (done,) = diagnose_traces([root / "traces" / CUPTI_RANGES], tmp_path)
    assert done.report is not None
    assert done.report.facts["trace_profiler_range_count"] == 77
    top = done.report.findings[0]
    assert top.rule_id == "trace-capture-incomplete"
    assert "kernel counters" in top.title and "profiler_metrics" in top.explanation


def test_cpu_ops_and_kernels_without_launch_calls_are_named(tmp_path: Path) -> None:
    trace = input_bound_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] != "cuda_runtime"]
    path = write_trace(tmp_path / "t.json", trace)
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    (capture,) = [f for f in done.report.findings if f.rule_id == "trace-capture-incomplete"]
    assert capture.title.endswith("no launch call")
    assert "cuda_runtime" in capture.explanation
