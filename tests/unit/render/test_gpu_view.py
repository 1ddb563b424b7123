"""The GPU timeline section, end to end from a recorded CUDA run directory (the hand-worked
cuda_two_steps.json trace: window 2000 µs, busy 460 µs) to every renderer."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from perfdoctor.diagnose import analyze_session
from perfdoctor.model import Report
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import report_from_dict, report_to_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal
from tests.unit.analyze.run_dir_builder import build_run_dir


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    root = tmp_path_factory.mktemp("session")
    build_run_dir(root)
    return analyze_session(root)


def test_report_carries_the_gpu_window_counts_and_top_kernels(report: Report) -> None:
    assert report.gpu["window_ms"] == pytest.approx(2.0)
    assert report.gpu["kernel_count"] == 5
    top = report.gpu["top_kernels"][0]
    assert top["name"].startswith("nvjet") and top["tensor_core"]
    assert top["share"] == pytest.approx(200 / 390)
    assert report_from_dict(report_to_dict(report)).gpu == report.gpu


def test_markdown_and_html_show_the_timeline(report: Report) -> None:
    md = render_markdown(report)
    assert "## GPU timeline" in md and "| busy | 23.0% |" in md
    assert "idle: dependencies" in md and "### Top kernels" in md
    html = render_html(report)
    assert "<h2>GPU timeline</h2>" in html and "nvjet_tst_128x64" in html


def test_terminal_shows_the_timeline(report: Report) -> None:
    out = io.StringIO()
    render_terminal(report, make_console(out))
    text = out.getvalue()
    assert "GPU timeline" in text and "Top kernels" in text and "23.0%" in text


def test_no_gpu_section_without_gpu_activity(tmp_path: Path) -> None:
    build_run_dir(tmp_path, with_trace=False)
    report = analyze_session(tmp_path)
    assert report.gpu == {}
    assert "GPU timeline" not in render_markdown(report)
