"""The brief (`report -f brief`, the MCP tools' text): short, and every number in it is the
number report.json holds for the same report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from perfdoctor.model import SourceLocation
from perfdoctor.render.brief import MAX_VERDICTS, brief_data, number, render_brief
from perfdoctor.render.json_report import render_json

from .fixtures import cpu_report, hostile_report

MAX_LINES = 40


def _written(tmp_path: Path, report):
    """The report as a session holds it: report.json on disk, built from the same Report."""
    session = tmp_path / "session"
    session.mkdir()
    report = replace(report, run_dir=str(session))
    (session / "report.json").write_text(render_json(report))
    return report, json.loads((session / "report.json").read_text())


def test_the_brief_is_short_and_its_numbers_are_report_json_s(tmp_path: Path) -> None:
    report, saved = _written(tmp_path, cpu_report())
    text = render_brief(report)
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES
    data = brief_data(report)
    # Verdicts: each figure is the one in report.json, and the text shows exactly it.
    for shown, stored in zip(data["verdicts"], saved["variants"], strict=True):
        for key in ("speedup", "interval", "method", "load", "verdict", "step_ms_p50"):
            assert shown[key] == stored[key], key
        assert f"{shown['label']}: {shown['decision']}, {number(stored['speedup'])}x" in text
    assert f"step p50 {number(saved['baseline']['step_ms_p50'])} ms" in text
    # Findings: the first evidence's value and threshold as report.json has them.
    for finding in data["findings"]:
        stored = next(f for f in saved["findings"] if f["rule_id"] == finding["rule_id"])
        first = stored["evidence"][0]
        assert finding["evidence"][0]["value"] == first["value"]
        assert f"{first['name']} = {number(first['value'])}" in text
    assert data["accepted"] == [v["label"] for v in saved["variants"] if v["verdict"] == "accepted"]
    assert f"report: {report.run_dir}/report.json" in text


def test_the_patch_path_is_given_only_when_the_file_exists(tmp_path: Path) -> None:
    report, _ = _written(tmp_path, cpu_report())
    assert brief_data(report)["fixes_patch"] is None
    assert "patch: none" in render_brief(report)
    patch = Path(report.run_dir) / "fixes.patch"
    patch.write_text("--- a/x.py\n+++ b/x.py\n")
    assert brief_data(report)["fixes_patch"] == str(patch)
    assert f"patch: {patch}" in render_brief(report)


def test_the_user_s_line_is_quoted_from_the_file(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\ntorch.autograd.set_detect_anomaly(True)\n")
    base = cpu_report()
    finding = replace(base.findings[0], locations=(SourceLocation(str(script), 2, "<module>"),))
    report = replace(base, findings=(finding, *base.findings[1:]))
    text = render_brief(report)
    assert f"at {script}:2: torch.autograd.set_detect_anomaly(True)" in text
    assert brief_data(report)["findings"][0]["locations"][0]["code"] == (
        "torch.autograd.set_detect_anomaly(True)"
    )


def test_many_verdicts_and_hostile_text_stay_within_the_limit() -> None:
    base = hostile_report()
    many = tuple(replace(base.variants[0], label=f"v{i}") for i in range(MAX_VERDICTS + 5))
    text = render_brief(replace(base, variants=many))
    assert len(text.splitlines()) <= MAX_LINES
    assert "(+5 more in report.json)" in text
    assert "\x1b" not in text
