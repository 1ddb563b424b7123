"""The compile section of every report format (render/compile_section.py), fed by the
diagnosis of a hand-made compile.json (tests/unit/analyze/test_compile_diag.py)."""

from __future__ import annotations

import dataclasses
import io
import json

from perfdoctor.analyze.compile_diag import diagnose_compile
from perfdoctor.render.compile_section import compile_section
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import render_json, report_from_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal
from tests.unit.analyze.test_compile_diag import _log, _regions

from .fixtures import cpu_report


def _report(label: str = "baseline"):
    data = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15)).to_json()
    base = cpu_report()
    return dataclasses.replace(base, series={**base.series, "compile": {label: data}})


def test_every_format_shows_the_ranked_issues_with_lines_and_fixes(monkeypatch) -> None:
    report = _report()
    monkeypatch.setenv("COLUMNS", "140")
    buf = io.StringIO()
    render_terminal(report, make_console(buf))
    outputs = {
        "terminal": buf.getvalue(),
        "md": render_markdown(report),
        "html": render_html(report),
    }
    for name, text in outputs.items():
        assert "graph breaks and recompiles" in text, name
        assert "train.py:57" in text and "train.py:53" in text, name
        assert "self.step_t" in text, name  # the storm's line, rewritten
        assert "train/eval switch" in text, name
        assert "not priced" in text, name
    md = outputs["md"]
    assert md.index("train.py:57") < md.index("train.py:53") < md.index("train.py:50")


def test_the_section_survives_report_json() -> None:
    report = _report()
    again = report_from_dict(json.loads(render_json(report)))
    assert compile_section(again) == compile_section(report)


def test_the_compile_variant_is_shown_when_the_script_does_not_compile() -> None:
    section = compile_section(_report(label="compile"))
    assert section is not None and section.label == "compile"
    assert "perfdoctor's `compile` variant" in section.notes[0]


def test_no_compile_data_no_section() -> None:
    assert compile_section(cpu_report()) is None
