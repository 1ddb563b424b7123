"""The report of a run stopped early (issue 25 item 3): no line chart of fewer than 2 steps
(it drew axes around nothing), no headline about other processes' load "during the timed
steps" when there were none, and warnings wrapped instead of cut off behind a scrollbar."""

from __future__ import annotations

from dataclasses import replace

from perfdoctor.model import Facts, Scalar
from perfdoctor.render.charts import build_charts
from perfdoctor.render.html import render_html
from perfdoctor.render.summary import headline
from perfdoctor.rules import evaluate

from .fixtures import cpu_report


def make_facts(**values: Scalar) -> Facts:
    return Facts(values=dict(values), locations={})


def _interrupted(steps: int):
    """cpu_report() cut to `steps` recorded steps of the baseline, all warm-up."""
    report = cpu_report(variants=())
    base = report.series["steps"]["baseline"]
    cut = {k: v[:steps] for k, v in base.items()}
    series = {**report.series, "steps": {"baseline": cut}}
    busy = evaluate(make_facts(cpu_other_busy_cores=1.8, cpu_cores_logical=2, steps_timed=0))
    findings = tuple(f for f in busy.findings if f.rule_id == "busy-machine")
    assert findings, "busy-machine fires on 1.8 of 2 cores"
    return replace(
        report,
        series=series,
        status="interrupted",
        exit_code=143,
        findings=findings,
        baseline=replace(report.baseline, steps_timed=0),
        warnings=("perfdoctor was stopped by SIGTERM during baseline: this report is partial",),
    )


def test_a_chart_of_one_step_is_a_note_not_empty_axes() -> None:
    charts = {c.key: c for c in build_charts(_interrupted(1))}
    for key in ("step_time", "loss"):
        assert charts[key].svg is None
        assert charts[key].missing.startswith("not drawn: 1 step recorded")
    # Two steps draw a line again.
    charts = {c.key: c for c in build_charts(_interrupted(2))}
    assert charts["step_time"].svg and charts["loss"].svg


def test_the_busy_machine_finding_does_not_claim_timed_steps_that_never_ran() -> None:
    without = evaluate(make_facts(cpu_other_busy_cores=1.8, cpu_cores_logical=2, steps_timed=0))
    with_steps = evaluate(make_facts(cpu_other_busy_cores=1.8, cpu_cores_logical=2, steps_timed=20))
    (none,) = [f for f in without.findings if f.rule_id == "busy-machine"]
    (some,) = [f for f in with_steps.findings if f.rule_id == "busy-machine"]
    assert "timed steps," not in none.explanation and "no timed steps" in none.explanation
    assert some.explanation.startswith("During the timed steps")


def test_the_headline_of_a_run_stopped_before_its_timed_steps_says_not_measured() -> None:
    head = headline(_interrupted(3))
    assert head.slow == "Not measured: the run was stopped before its first timed training step."
    assert "Other processes" not in head.slow
    assert "--warmup" in head.fix
    assert head.status_note == "The run was interrupted; this report is partial."


def test_the_html_wraps_warnings_and_shows_the_notes() -> None:
    html = render_html(_interrupted(1))
    assert '<ul class="warnings">' in html
    assert ".warnings pre { white-space: pre-wrap;" in html
    # The step breakdown's bar column shrinks with the window: at 480 px it was cut off.
    assert ".barcol { display: inline-block; width: min(160px, 22vw); }" in html
    assert "not drawn: 1 step recorded" in html
