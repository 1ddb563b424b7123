"""The memory section of every report format, fed by a snapshot's series (analyze/memory.py
`memory_series` of the hand-made history fixture: peak 8680 bytes, sites model.py:12/14)."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path

from perfdoctor.analyze.memory import load_memory, memory_series
from perfdoctor.render.charts import build_charts
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import render_json, report_from_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.memory_section import memory_section, sparkline
from perfdoctor.render.terminal import make_console, render_terminal

from .fixtures import cpu_report

SNAPSHOT = Path(__file__).parents[1] / "analyze" / "fixtures" / "snapshot_history.pickle"


def _report(file: str = "proj/model.py"):
    series = memory_series(load_memory(SNAPSHOT))
    for site in series["summary"]["top_sites"]:
        if site["line"] == 12:
            site["file"] = file
    base = cpu_report()
    return dataclasses.replace(base, series={**base.series, "memory": {"baseline": series}})


def test_every_format_shows_peak_split_and_sites(monkeypatch) -> None:
    report = _report()
    monkeypatch.setenv("COLUMNS", "100")
    buf = io.StringIO()
    render_terminal(report, make_console(buf))
    markdown = render_markdown(report)
    html = render_html(report)
    for text in (buf.getvalue(), markdown, html):
        assert "GPU memory (CUDA memory snapshot)" in text
        assert "8.5 KiB" in text  # peak allocated, 8680 bytes
        assert "12.0 KiB" in text  # peak reserved
        assert "activations" in text and "optimizer state" in text
        assert "model.py:12" in text
        assert "expandable" in text  # (Markdown escapes the underscore)
    assert "allocated over time" in buf.getvalue()
    # The chart also draws the reserved line.
    memory_chart = next(c for c in build_charts(report) if c.key == "memory")
    assert memory_chart.svg is not None and "reserved" in memory_chart.svg


def test_json_round_trip_keeps_the_section() -> None:
    report = _report()
    again = report_from_dict(json.loads(render_json(report)))
    assert memory_section(again) == memory_section(report)


def test_untrusted_file_names_stay_text() -> None:
    report = _report(file="<script>alert(1)</script>|x.py")
    html = render_html(report)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;|x.py" in html
    assert "\\<script\\>alert(1)\\</script\\>\\|x.py" in render_markdown(report)


def test_no_section_without_a_snapshot() -> None:
    report = cpu_report()
    assert memory_section(report) is None
    assert "GPU memory (CUDA memory snapshot)" not in render_html(report)
    empty = copy.deepcopy(report.series)
    empty["memory"] = {"baseline": memory_series(None)}
    assert memory_section(dataclasses.replace(report, series=empty)) is None


def test_sparkline_keeps_the_peak() -> None:
    line = sparkline([0] * 500 + [10] + [0] * 499, width=40)
    assert len(line) == 40 and line.count("█") == 1
