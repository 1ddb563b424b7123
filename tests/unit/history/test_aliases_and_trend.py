"""`compare previous latest`, `perfdoctor history`, and report.html's step-time trend, on
small session directories (the recorded CPU run as each baseline; no child run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.cli import app
from perfdoctor.diagnose import write_reports
from perfdoctor.errors import TargetNotFound, UsageError
from perfdoctor.history import INDEX_FILE
from perfdoctor.history.aliases import resolve_alias
from perfdoctor.history.trend import with_trend
from perfdoctor.render.history_section import html_section
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import report_from_dict
from tests.unit.history.sessions import make_session


def _cli(*args: str | Path):
    return CliRunner(env={"COLUMNS": "250"}).invoke(app, [str(a) for a in args])


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    out = tmp_path / "perfdoctor-runs"
    make_session(out, "20261201-100000-train", created_at="2026-12-01T10:00:00+0000", step_ms=50)
    make_session(out, "20261202-100000-train", created_at="2026-12-02T10:00:00+0000", step_ms=45)
    make_session(out, "20261203-100000-train", created_at="2026-12-03T10:00:00+0000", step_ms=40)
    return out


def test_latest_and_previous_of_the_only_script(runs: Path):
    assert resolve_alias("latest", runs, None).name == "20261203-100000-train"
    assert resolve_alias("previous", runs, None).name == "20261202-100000-train"


def test_several_scripts_need_script(runs: Path):
    make_session(runs, "20261204-100000-eval", script="eval.py", created_at="2026-12-04T10")
    with pytest.raises(UsageError, match="ambiguous"):
        resolve_alias("latest", runs, None)
    assert resolve_alias("latest", runs, "eval.py").name == "20261204-100000-eval"
    assert resolve_alias("latest", runs, "train.py").name == "20261203-100000-train"
    with pytest.raises(TargetNotFound, match="only one session"):
        resolve_alias("previous", runs, "eval.py")
    with pytest.raises(TargetNotFound, match=r"no session of x\.py"):
        resolve_alias("latest", runs, "x.py")


def test_compare_previous_latest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    out = tmp_path / "perfdoctor-runs"
    for day in (1, 2):
        make_session(
            out,
            f"2026120{day}-100000-cnn",
            created_at=f"2026-12-0{day}T10:00:00+0000",
            with_run=True,
        )
    monkeypatch.chdir(tmp_path)  # --out defaults to ./perfdoctor-runs
    got = _cli("compare", "previous", "latest", "--json")
    assert got.exit_code == 0, got.output
    assert "previous: " in got.stderr and "20261201-100000-cnn" in got.stderr
    assert "latest: " in got.stderr and "20261202-100000-cnn" in got.stderr
    data = json.loads(got.stdout)
    assert data  # the comparison of two real recorded runs
    bad = _cli("compare", "previous", "latest", "--script", "nothing.py")
    assert bad.exit_code == 66


def test_history_command(runs: Path):
    got = _cli("history", "--out", runs, "--json")
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert [s["step_ms_p50"] for s in data["sessions"]] == [50, 45, 40]
    assert data["sessions"][0]["accepted_fixes"] == ["dataloader-workers"]
    assert (runs / INDEX_FILE).is_file()
    table = _cli("history", "train.py", "--out", runs)
    assert table.exit_code == 0
    assert "2026-12-03 10:00" in table.stdout and "--epochs" in table.stdout
    assert _cli("history", "--out", runs / "nope").exit_code == 66


def test_the_trend_of_past_sessions_in_report_html(runs: Path):
    current = runs / "20261203-100000-train"
    report = report_from_dict(json.loads((current / "report.json").read_text()))
    trended = with_trend(current, report)
    points = trended.series["history"]["sessions"]
    assert [p["step_ms_p50"] for p in points] == [50, 45, 40]
    assert [p["current"] for p in points] == [False, False, True]
    section = html_section(trended)
    assert "<svg" in section and "<polyline" in section and "History of train.py" in section
    assert section in render_html(trended)
    # Self-contained: the SVG's namespace is the only URL, and it is never fetched.
    assert section.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0
    # The reports written for a session carry it (report.json too).
    written = write_reports(current, report)
    assert "history" in json.loads(written.paths["report.json"].read_text())["series"]
    assert 'id="chart-history"' in written.paths["report.html"].read_text()


def test_no_trend_for_a_first_session_or_a_copied_one(tmp_path: Path, runs: Path):
    first = make_session(tmp_path / "fresh", "20261201-100000-train")
    report = report_from_dict(json.loads((first / "report.json").read_text()))
    assert "history" not in with_trend(first, report).series
    assert html_section(report) == ""
    # A session copied next to unrelated directories: no index, no `latest`, no trend.
    import shutil

    lone = tmp_path / "copies" / "20261203-100000-train"
    shutil.copytree(runs / "20261203-100000-train", lone)
    assert "history" not in with_trend(lone, report).series
    assert not (lone.parent / INDEX_FILE).exists()
