"""The batch / memory section (render/batch_section.py) in every format."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from perfdoctor.render.batch_section import TITLE, batch_section, curve_svg
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import render_json, report_from_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal

from .fixtures import cpu_report


def _plan(**changes: Any) -> dict[str, Any]:
    # The shape batch_plan.py writes (run_schema.BatchPlan), gpt_char_lm.py's figures.
    plan: dict[str, Any] = {
        "knob": "argument",
        "knob_detail": "the script's --batch-size argument (its default)",
        "script_batch": 32,
        "device": "cpu",
        "peak_kind": "rss",
        "limit_bytes": 20628069580,
        "limit_source": "available RAM less 10%",
        "fixed_bytes": 341471232.0,
        "per_sample_bytes": 3014509.7,
        "fit_worst_residual_frac": 0.0001,
        "limit_batch": 6729,
        "verify_batch": 128,
        "verify_why": "a batch not measured for the fit",
        "verify_error_frac": -0.003,
        "curve": [
            {
                "batch": 16,
                "run": "batch-16",
                "samples_s": 43.6,
                "peak_bytes": 389730304,
                "predicted_bytes": 389703387.4,
                "role": "fit",
                "status": "completed",
            },
            {
                "batch": 32,
                "run": "batch-32",
                "samples_s": 55.5,
                "peak_bytes": 437895168,
                "predicted_bytes": 437935542.8,
                "role": "fit",
                "status": "completed",
            },
            {
                "batch": 64,
                "run": "batch-64",
                "samples_s": 68.1,
                "peak_bytes": 534413312,
                "predicted_bytes": 534399853.7,
                "role": "fit",
                "status": "completed",
            },
            {
                "batch": 128,
                "run": "batch-128",
                "samples_s": 55.5,
                "peak_bytes": 729485312,
                "predicted_bytes": 727328475.4,
                "role": "verify",
                "status": "completed",
            },
        ],
        "best_batch": 64,
        "confirmation": "accepted: samples/s faster: 1.21x ± 0.08 (batch 64 against 32)",
        "recommended_batch": 64,
        "wanted_batch": 32,
        "wanted_fits": True,
        "recipe_note": "A different batch size changes the training recipe: scale the LR.",
    }
    plan.update(changes)
    return plan


def _report(plan: dict[str, Any] | None = None):
    base = cpu_report()
    return dataclasses.replace(base, series={**base.series, "batch_plan": plan or _plan()})


def test_every_format_shows_the_fit_the_check_the_curve_and_the_recipe(monkeypatch) -> None:
    report = _report()
    monkeypatch.setenv("COLUMNS", "110")
    buf = io.StringIO()
    render_terminal(report, make_console(buf))
    for text in (buf.getvalue(), render_markdown(report), render_html(report)):
        assert TITLE in text
        assert "325.7 MiB + 2.9 MiB per sample" in text
        assert "Check at batch 128" in text and "-0.3%" in text
        assert "Fastest within memory: batch 64" in text
        assert "1.21x" in text and "Recommended: batch 64" in text
        assert "training recipe" in text
        assert "509.7 MiB" in text  # the peak at batch 64, in the curve
    assert "<svg" in render_html(report).split(TITLE, 1)[1]


def test_json_round_trip_keeps_the_section() -> None:
    report = _report()
    again = report_from_dict(json.loads(render_json(report)))
    assert batch_section(again) == batch_section(report)


def test_options_when_the_wanted_batch_does_not_fit() -> None:
    plan = _plan(
        wanted_batch=128,
        wanted_fits=False,
        options=[
            {
                "id": "activation-checkpointing",
                "batch": 128,
                "peak_bytes": 600 * 2**20,
                "saved_bytes": 95 * 2**20,
                "samples_s": 45.0,
                "time_cost_frac": 0.19,
                "fits": True,
            },
            {
                "id": "amp-bf16",
                "batch": 128,
                "peak_bytes": 700 * 2**20,
                "fits": False,
            },
            {
                "id": "grad-accumulation",
                "batch": 64,
                "peak_bytes": 534413312,
                "saved_bytes": 195072000,
                "samples_s": 68.1,
                "time_cost_frac": -0.23,
                "fits": True,
                "note": "2 micro-batches of 64 per optimizer step (measured at 64)",
            },
        ],
    )
    markdown = render_markdown(_report(plan))
    assert "Batch 128 does not fit" in markdown
    assert (
        "| activation-checkpointing | 128 | 600.0 MiB | 95.0 MiB | 45.0 | +19% | fits |" in markdown
    )
    assert "2 micro-batches of 64" in markdown
    assert "| amp-bf16 | 128 | 700.0 MiB | - | - | - | does not fit |" in markdown


def test_a_script_whose_batch_cannot_change_gets_one_line() -> None:
    plan = {
        "knob": "none",
        "knob_detail": "the batch size cannot be changed without editing the script",
        "recipe_note": "",
    }
    section = batch_section(_report(plan))
    assert section is not None and len(section.lines) == 1 and not section.curve
    assert "cannot be changed" in render_markdown(_report(plan))


def test_no_section_without_a_plan_and_untrusted_text_stays_text() -> None:
    assert batch_section(cpu_report()) is None
    assert TITLE not in render_html(cpu_report())
    html = render_html(_report(_plan(knob_detail="<script>alert(1)</script>")))
    assert "<script>alert" not in html and "&lt;script&gt;" in html


def test_chart_needs_two_points() -> None:
    report = _report(_plan(curve=[_plan()["curve"][0]]))
    section = batch_section(report)
    assert section is not None and curve_svg(section) is None


def test_an_unconfirmed_batch_is_not_recommended() -> None:
    plan = _plan(
        confirmation="rejected: samples/s within noise: 0.99x ± 0.36", recommended_batch=32
    )
    assert "Recommended: keep batch 32" in render_markdown(_report(plan))


def test_an_automatic_plan_says_why_it_ran_how_far_it_got_and_how_sure_it_is() -> None:
    plan = _plan(
        trigger="apply: the headline is about memory (memory-near-capacity)",
        budget_s=240.0,
        stopped="stopped before the paired confirmation: 4 more run(s) of about 30 s would "
        "overrun the automatic plan's budget of 240 s (200 s spent; --plan-batch runs the "
        "whole plan)",
        prediction_confidence="unreliable",
        refit_fixed_bytes=424.2 * 2**20,
        refit_per_sample_bytes=1.7 * 2**20,
        recheck_batch=160,
        recheck_error_frac=-0.046,
        confidence_why="at batch 80 the prediction was off by +19.2%: the process RSS grew "
        "less than linearly",
    )
    section = batch_section(_report(plan))
    assert section is not None
    text = " ".join(section.lines)
    assert text.startswith("Run by apply: the headline is about memory")
    assert "Prediction unreliable: at batch 80" in text
    assert "Refitted with the check's run: 424.2 MiB + 1.7 MiB per sample" in text
    assert "checked at batch 160: prediction -4.6% from the measured peak" in text
    assert "The plan stopped before the paired confirmation" in text
    markdown = render_markdown(_report(plan))
    assert "Prediction unreliable" in markdown and "Run by apply" in markdown
    # --plan-batch itself is not announced.
    plain = batch_section(_report(_plan(trigger="--plan-batch")))
    assert plain is not None and not plain.lines[0].startswith("Run by")
