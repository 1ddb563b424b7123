"""The compile section of every report format (render/compile_section.py), fed by the
diagnosis of a hand-made compile.json (tests/unit/analyze/test_compile_diag.py)."""

from __future__ import annotations

import dataclasses
import io
import json

from perfdoctor.analyze.compile_diag import diagnose_compile
from perfdoctor.model import VariantResult
from perfdoctor.render import format as fmt
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


def _lift(speedup: float, base_ms: float = 20.0) -> VariantResult:
    return VariantResult(
        label="compile-lift-disable",
        optimizations=("compile-lift-disable",),
        step_ms_p50=base_ms / speedup,
        step_ms_p90=None,
        speedup=speedup,
        speedup_noise=0.05,
        peak_memory_bytes=None,
        loss_delta=0.0,
        verdict="accepted",
        reason="faster",
        baseline_step_ms_p50=base_ms,
        method="in-process",
        interval=(speedup - 0.05, speedup + 0.05),
        pairs=27,
    )


def _disable_row(report):
    section = compile_section(report)
    assert section is not None
    return next(r for r in section.rows if r.cells[2] == "train.py:53")


def test_a_disabled_helper_shows_its_bound_and_says_it_was_not_measured() -> None:
    row = _disable_row(_report())
    assert row.cells[4] == "≤2.00 ms"
    assert row.price is not None and row.price.startswith("at most 2.00 ms/step")
    assert "not measured" in row.price


def test_the_measured_lift_is_shown_beside_the_bound_and_ranks_the_row() -> None:
    base = _report()
    step = base.baseline.step_ms_p50
    # lifting bought 1.25x of a 20 ms A/B step: 20% of the step, as a share of this run's
    report = dataclasses.replace(base, variants=(*base.variants, _lift(1.25)))
    row = _disable_row(report)
    assert row.cells[4] == f"{fmt.ms(0.2 * step)} (≤2.00 ms)"
    assert row.price is not None
    assert row.price.startswith("measured: lifting the disable buys 20.0% of the step")
    assert "4.00 ms" in row.price and "27 pairs" in row.price and "at most 2.00" in row.price
    md = render_markdown(report)
    assert "measured: lifting the disable buys 20.0%" in md
    # rows rank by what removing each buys: a lift measured below the .item() break's price
    small = dataclasses.replace(base, variants=(_lift(1.0 + 0.2 / step),))
    section = compile_section(small)
    assert section is not None
    wheres = [r.cells[2] for r in section.rows]
    assert wheres.index("train.py:50") < wheres.index("train.py:53")
    # a measured lift that costs time says so
    slower = dataclasses.replace(base, variants=(_lift(0.8),))
    assert "lifting the disable costs 25.0%" in (_disable_row(slower).price or "")


def test_below_the_noise_is_said_and_not_ranked_as_a_figure() -> None:
    data = diagnose_compile(_log(), _regions(), measured_steps=range(5, 15), noise_ms=1.0).to_json()
    base = cpu_report()
    report = dataclasses.replace(base, series={**base.series, "compile": {"baseline": data}})
    section = compile_section(report)
    assert section is not None
    item = next(r for r in section.rows if r.cells[2] == "train.py:50")
    assert item.cells[4] == "below noise"
    assert item.price is not None and "below the noise" in item.price and "1.00 ms" in item.price
