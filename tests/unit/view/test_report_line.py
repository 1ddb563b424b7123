"""report.html (and .md, the terminal) say how to open the trace offline."""

from __future__ import annotations

from dataclasses import replace

from perfdoctor.render.html import render_html
from perfdoctor.render.summary import view_command
from tests.unit.render.fixtures import cpu_report


def test_report_html_has_the_view_command():
    report = cpu_report()
    command = view_command(report)
    assert command == f"perfdoctor view {report.run_dir}"
    assert command in render_html(report)


def test_no_trace_no_view_line():
    report = replace(cpu_report(), artifacts={})
    assert view_command(report) == ""
    assert "perfdoctor view" not in render_html(report)
