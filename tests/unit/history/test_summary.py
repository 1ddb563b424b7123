"""A session's history row, built from its saved artifacts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from perfdoctor.history.summary import SessionSummary, load_summary, summarize
from perfdoctor.render.json_report import report_to_dict
from perfdoctor.rundir import SESSION_FILE
from tests.unit.history.sessions import make_session
from tests.unit.render.fixtures import cpu_report


def test_the_row_of_a_session(tmp_path: Path):
    cwd = tmp_path / "proj"
    session = make_session(
        tmp_path / "runs",
        "20261201-100000-train",
        cwd=cwd,
        git={"commit": "a" * 40, "dirty": True},
    )
    row = load_summary(session)
    assert row is not None
    assert row.session == "20261201-100000-train"
    assert row.path == str(session)
    assert row.created_at == "2026-12-01T10:00:00+0000"
    assert row.script == "train.py"
    assert row.script_path == str(cwd / "train.py")
    assert row.argv == ("--epochs", "2")
    assert (row.git_commit, row.git_dirty) == ("a" * 40, True)
    assert row.step_ms_p50 == 40.0
    assert row.accepted_fixes == ("dataloader-workers",)  # set-num-threads was rejected
    assert (row.fixed_step_ms_p50, row.speedup) == (17.2, 2.4302325581395348)
    assert row.headline.startswith("Training waits for the DataLoader")
    assert row.status == "completed" and not row.interrupted
    assert json.loads(json.dumps(row.to_dict()))["argv"] == ["--epochs", "2"]


def test_a_module_and_no_git(tmp_path: Path):
    session = make_session(tmp_path, "s", script="pkg.train", kind="module")
    row = load_summary(session)
    assert row is not None
    assert (row.script, row.script_path, row.git_commit) == ("-m pkg.train", None, None)


def test_without_session_json_the_report_says_what_ran(tmp_path: Path):
    session = make_session(tmp_path, "s", accepted=False)
    (session / SESSION_FILE).unlink()
    row = load_summary(session)
    assert row is not None
    assert (row.script, row.script_path, row.accepted_fixes) == ("train.py", None, ())
    assert row.fixed_step_ms_p50 is None


def test_no_report_no_row(tmp_path: Path):
    session = make_session(tmp_path, "s")
    (session / "report.json").write_text("{not json")
    assert load_summary(session) is None
    (session / "report.json").unlink()
    assert load_summary(session) is None


def test_a_peel_comparison_is_no_accepted_fix(tmp_path: Path):
    base = cpu_report()
    peel = replace(base.variants[0], label="peel", optimizations=("amp-bf16",), peel_of="x")
    data = report_to_dict(replace(base, variants=(*base.variants, peel)))
    row = summarize(tmp_path, None, data)
    assert isinstance(row, SessionSummary)
    assert row.accepted_fixes == ("dataloader-workers",)
