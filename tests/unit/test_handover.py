"""The MCP tools' work without the protocol (perfdoctor/handover/): the root they keep to,
the sessions they list, the progress they read, the skill they ship. The server itself is
driven through the SDK in tests/integration/test_mcp_server.py."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.cli import app
from perfdoctor.errors import EXIT_MISSING_TOOL, TargetNotFound, UsageError
from perfdoctor.handover import sessions, skill
from perfdoctor.handover import workspace as work
from perfdoctor.handover.profile_run import ProfileRequest, ProgressState
from perfdoctor.render.progress import JSON_PROGRESS_PREFIX, JsonLinesSink

FIXTURE_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


@pytest.fixture
def ws(tmp_path: Path) -> work.Workspace:
    (tmp_path / "root").mkdir()
    return work.Workspace.at(tmp_path / "root")


def test_paths_are_taken_only_from_under_the_root(ws: work.Workspace, tmp_path: Path) -> None:
    (ws.root / "train.py").write_text("pass\n")
    assert ws.script("train.py") == ws.root / "train.py"
    assert ws.script(str(ws.root / "train.py")) == ws.root / "train.py"
    outside = tmp_path / "elsewhere.py"
    outside.write_text("pass\n")
    (ws.root / "link.py").symlink_to(outside)
    for given in (str(outside), "../elsewhere.py", "link.py", "/etc/passwd"):
        with pytest.raises(work.OutsideRoot, match="outside the root"):
            ws.script(given)
    with pytest.raises(TargetNotFound, match="does not exist"):
        ws.script("missing.py")
    with pytest.raises(UsageError, match="no script given"):
        ws.script(" ")


def test_sessions_are_the_history_s_newest_first_with_their_patch(ws: work.Workspace) -> None:
    from tests.unit.history.sessions import make_session

    old = make_session(ws.out, "20260101-100000-train", created_at="2026-01-01T10:00:00+0000")
    (old / "fixes.patch").write_text("--- a/train.py\n")
    new = make_session(
        ws.out, "20260102-100000-train", created_at="2026-01-02T10:00:00+0000", step_ms=20.0
    )
    make_session(ws.out, "20260103-100000-other", script="other.py")

    rows = sessions.session_rows(ws.out, "train.py")
    assert [Path(r["path"]) for r in rows] == [new, old]
    assert [r["fixes_patch"] for r in rows] == [None, str(old / "fixes.patch")]
    assert ws.run_path("latest", "train.py") == new
    assert ws.run_path("previous", "train.py") == old
    with pytest.raises(UsageError, match="ambiguous"):
        ws.run_path("latest")  # two scripts: say which
    with pytest.raises(TargetNotFound):
        ws.run_path("previous", "other.py")

    shown = work.history(ws, "train.py", limit=1)
    assert (shown.data["total"], len(shown.data["sessions"])) == (2, 1)
    assert shown.data["sessions"][0]["step_ms_p50"] == 20.0
    assert "step p50 20 ms" in shown.text and "accepted: " in shown.text


def test_explain_gives_a_rule_s_thresholds_and_an_optimization_s_change() -> None:
    rule = work.explain("anomaly-detection-on")
    assert rule.data["rule"]["thresholds"] == {"assumed_slowdown": 1.25}
    assert rule.data["fixes"][0]["id"] == "anomaly-off"
    assert "source: measured here" in rule.text
    fix = work.explain("anomaly-off")
    assert fix.data["optimization"]["code_change"].startswith("# remove")
    assert [r["id"] for r in fix.data["addresses"]] == ["anomaly-detection-on"]
    with pytest.raises(UsageError, match="did you mean anomaly-off"):
        work.explain("anomaly-of")


def test_compare_and_report_read_runs_under_the_root(tmp_path: Path) -> None:
    ws = work.Workspace.at(FIXTURE_RUNS, tmp_path / "out")
    compared = work.compare(ws, "tuned_mlp_cpu", "tabular_mlp_debug_cpu", fail_if_slower=10)
    assert compared.data["brief_verdict"]["speedup"] == compared.data["verdict"]["speedup"]
    assert compared.data["gate_exit_code"] in (0, 70, 71)
    assert "gate: " in compared.text
    # A lone child run (committed): read, never written into.
    before = sorted(p.name for p in (FIXTURE_RUNS / "tuned_mlp_cpu").iterdir())
    done = work.report(ws, "tuned_mlp_cpu", "json")
    assert json.loads(done.text)["baseline"]["step_ms_p50"] == done.data["step_ms_p50"]
    assert sorted(p.name for p in (FIXTURE_RUNS / "tuned_mlp_cpu").iterdir()) == before
    with pytest.raises(UsageError, match="format must be one of"):
        work.report(ws, "tuned_mlp_cpu", "xml")


def test_progress_lines_become_stage_pairs_and_eta() -> None:
    stream = io.StringIO()
    sink = JsonLinesSink(stream)
    sink.note("trying: anomaly-off")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith(JSON_PROGRESS_PREFIX)
    assert json.loads(lines[0][len(JSON_PROGRESS_PREFIX) :]) == {
        "event": "note",
        "message": "trying: anomaly-off",
    }
    state = ProgressState()
    baseline = {"label": "baseline", "description": "run 1/1 baseline", "planned_runs": 1}
    ab = {"label": "ab", "description": "run 2/3 in-process A/B", "planned_runs": 3}
    for event in (
        {"event": "run_started", "planned_steps": 10, **baseline},
        {"event": "run_finished", "label": "baseline", "status": "completed"},
        {"event": "run_started", "planned_steps": 10, "session_left_s": 40.0, **ab},
        {"event": "step", "step": 120, "note": "anomaly-off 3.95x [2.06, 7.57] 27 pairs"},
    ):
        state.update(event)
    message = state.message()
    assert message.startswith("stage: run 2/3 in-process A/B; runs 1/3")
    assert "pairs so far: anomaly-off 3.95x [2.06, 7.57] 27 pairs" in message
    assert "ETA ~" in message
    assert 1 <= state.progress < 2


def test_the_profile_command_keeps_the_script_s_arguments_last(tmp_path: Path) -> None:
    request = ProfileRequest(
        script=tmp_path / "train.py",
        args=("--steps", "3"),
        out=tmp_path / "runs",
        steps=8,
        apply=False,
        only=("anomaly-off",),
        ab_budget_s=2.5,
    )
    cmd = request.command()
    assert cmd[:4] == [sys.executable, "-m", "perfdoctor", "profile"]
    assert cmd[-3:] == [str(tmp_path / "train.py"), "--steps", "3"]
    assert {"--progress-json", "--no-apply", "--quiet", "--json"} <= set(cmd)
    assert cmd[cmd.index("--ab-budget") + 1] == "2.5"
    assert cmd[cmd.index("--only") + 1] == "anomaly-off"


def test_the_skill_has_front_matter_and_is_printed_or_written(tmp_path: Path) -> None:
    text = skill.skill_text()
    head, sep, body = text.removeprefix("---\n").partition("\n---\n")
    assert sep and "name: perfdoctor" in head.splitlines()
    assert any(line.startswith("description: ") for line in head.splitlines())
    for must in ("fixes.patch", "undecided", "accepted", "explain", "history"):
        assert must in body
    runner = CliRunner()
    printed = runner.invoke(app, ["skill"])
    assert printed.exit_code == 0 and printed.stdout == text
    written = runner.invoke(app, ["skill", "--write", str(tmp_path / "skills")])
    assert written.exit_code == 0
    assert (tmp_path / "skills" / "perfdoctor" / "SKILL.md").read_text() == text
    (tmp_path / "file").write_text("")
    refused = runner.invoke(app, ["skill", "--write", str(tmp_path / "file")])
    assert refused.exit_code == 2


def test_mcp_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # `import mcp...` raises ImportError, also where another test imported it already.
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] or ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "perfdoctor.handover.mcp_server", raising=False)
    done = CliRunner().invoke(app, ["mcp", "--root", os.getcwd()])
    assert done.exit_code == EXIT_MISSING_TOOL
    assert "pip install 'perfdoctor[agent]'" in done.stderr


def test_report_prints_the_brief_of_a_committed_run() -> None:
    done = CliRunner().invoke(app, ["report", str(FIXTURE_RUNS / "tuned_mlp_cpu"), "-f", "brief"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("perfdoctor brief: tuned_mlp.py")
    assert 3 < len(lines) <= 40
