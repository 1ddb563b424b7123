"""Part 3 of issue 22: without ProfilerStep spans the GPU timeline's idle shares still name
the headline cause, so the GPU timeline section and the headline agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report
from perfdoctor.render import gpu_view, summary

from .gpu_corpus import corpus_dir
from .synthetic_trace import input_bound_trace, write_trace

# The section's idle row -> words the headline uses for that cause.
_CAUSE_WORDS = {
    "idle: input data": "input data",
    "idle: malloc/free": "memory allocation",
    "idle: after a sync": "synchronizations",
    "idle: host busy": "launch",
    "idle: launch gaps": "launch",
    "idle: dependencies": "queued work",
    "idle: host unrecorded": "does not record",
}


def _without_steps(trace: dict[str, Any]) -> dict[str, Any]:
    events = [e for e in trace["traceEvents"] if not e["name"].startswith("ProfilerStep#")]
    return {**trace, "traceEvents": events}


def _biggest_idle_row(report: Report) -> tuple[str, float]:
    rows = [r for r in gpu_view.timeline_rows(report) if r.label.startswith("idle")]
    best = max(rows, key=lambda r: float(r.value.rstrip("%")))
    return best.label, float(best.value.rstrip("%"))


def _report(tmp_path: Path, path: Path) -> Report:
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    return done.report


def test_input_bound_without_steps_headlines_the_input_data(tmp_path: Path) -> None:
    trace = _without_steps(input_bound_trace(data_frac=0.45))
    report = _report(tmp_path, write_trace(tmp_path / "t.json", trace))
    assert report.facts.get("data_wait_frac") is None  # no steps: the step-based wait is unknown
    label, value = _biggest_idle_row(report)
    assert label == "idle: input data"
    assert value > 40
    head = summary.headline(report)
    assert "input data" in head.slow
    assert "DataLoader" in head.fix or "data" in head.fix.lower()


@pytest.mark.parametrize(
    "name",
    [
        "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "hta_critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
        "hta_critical_path_cuda_event_sync_event_sync_trace.json.gz",
    ],
)
def test_headline_and_section_agree_on_corpus_traces(tmp_path: Path, name: str) -> None:
    root = corpus_dir()
    if root is None or not (root / "traces" / name).is_file():
        pytest.skip("shared GPU corpus not found")
    report = _report(tmp_path, root / "traces" / name)
    label, value = _biggest_idle_row(report)
    head = summary.headline(report).slow
    assert _CAUSE_WORDS[label] in head, (label, value, head)
