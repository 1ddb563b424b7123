"""The first screen tells the outcome (render/outcome.py): the Fix and Measured lines name the
best accepted fix, its speedup and interval, and the patch; the terminal summary ends with
the command that applies it; rejected fixes are not pushed in the recommendations."""

from __future__ import annotations

import io
from dataclasses import replace

from perfdoctor.model import Facts
from perfdoctor.optimize.measured_recommendations import follow_measurement
from perfdoctor.render import summary
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal

from .fixtures import cpu_report

PATCH = {
    "path": "/runs/s/fixes.patch",
    "root": "/home/me/proj",
    "apply": "cd /home/me/proj && git apply /runs/s/fixes.patch",
    "hunks": [
        {
            "optimization_id": "dataloader-workers",
            "file": "sample_models/image_cnn.py",
            "line": 48,
            "change": "num_workers=2",
            "gain": "2.43x [2.30, 2.57] (dataloader-workers, in-process)",
        }
    ],
    "lines_to_add": [],
    "text": "# ...\n",
}


def with_interval():
    report = cpu_report()
    accepted = replace(report.variants[0], interval=(2.30, 2.57), method="in-process", pairs=12)
    return replace(report, variants=(accepted, report.variants[1]), fix_patch=PATCH)


def test_fix_and_measured_lines_name_the_accepted_fix_and_the_patch():
    head = summary.headline(with_interval())
    assert "Load batches in worker processes (dataloader-workers)" in head.fix
    assert "fixes.patch" in head.fix
    assert "2.43x [2.30, 2.57] faster" in head.fix
    assert "2.43x [2.30, 2.57]" in head.measured
    assert "over 12 paired blocks" in head.measured
    assert "faster" in head.measured


def test_the_accepted_fix_leads_even_when_its_finding_is_not_the_top_one():
    report = with_interval()
    # The accepted fix addresses the second finding only; the first one's fix was rejected.
    findings = (report.findings[1], report.findings[0], *report.findings[2:])
    head = summary.headline(replace(report, findings=findings))
    assert "dataloader-workers" in head.fix


def test_without_an_accepted_fix_the_diagnosis_speaks():
    report = cpu_report()
    rejected = tuple(replace(v, verdict="rejected") for v in report.variants)
    head = summary.headline(replace(report, variants=rejected))
    assert "accepted by measurement" not in head.fix
    assert "none accepted" in head.measured or "rejected" in head.measured


def test_terminal_ends_with_the_apply_command(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    buf = io.StringIO()
    render_terminal(with_interval(), make_console(buf))
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    assert lines[-2].startswith("Apply the proven fixes: cd /home/me/proj && git apply")
    assert "patch -p1 <" in lines[-1] and "-R" in lines[-1]


def test_markdown_lists_each_change_with_its_measured_gain():
    text = render_markdown(with_interval())
    assert "## Patch of the proven fixes" in text
    assert "num\\_workers=2" in text or "num_workers=2" in text
    assert "cd /home/me/proj && git apply /runs/s/fixes.patch" in text


def test_recommendations_follow_the_measurement():
    report = cpu_report()
    variants = report.variants  # dataloader-workers accepted, set-num-threads rejected
    recs = list(reversed(report.recommendations))  # the diagnosis put the rejected one first
    ordered = follow_measurement(recs, variants, Facts(values={}))
    ids = [r.optimization_id for r in ordered]
    assert ids[0] == "dataloader-workers"
    assert ids[-1] == "set-num-threads"  # measured and rejected: last, not pushed
    assert "measured: 2.43x" in ordered[0].expected_gain.method
    assert any("measured on this run: rejected" in c for c in ordered[-1].conflicts)


def test_an_accepted_fix_no_finding_named_is_added():
    report = cpu_report()
    recs = [r for r in report.recommendations if r.optimization_id != "dataloader-workers"]
    ordered = follow_measurement(recs, report.variants, Facts(values={}))
    assert ordered[0].optimization_id == "dataloader-workers"
    assert ordered[0].code_change  # the catalog's by-hand change


def test_html_lists_the_patch_escaped():
    from perfdoctor.render.html import render_html

    hostile = {**PATCH, "apply": "cd /tmp/<b> && git apply x"}
    text = render_html(replace(with_interval(), fix_patch=hostile))
    assert "Patch of the proven fixes" in text
    assert "cd /tmp/&lt;b&gt; &amp;&amp; git apply x" in text
