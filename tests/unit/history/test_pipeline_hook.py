"""A session that perfdoctor was stopped in gets its history row with its partial report, and
`perfdoctor tensorboard` says its Profiler tab needs the internet (pointing to `view`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from perfdoctor import pipeline
from perfdoctor.errors import Stopped
from perfdoctor.history import list_sessions
from perfdoctor.model import StepPlan, Target
from perfdoctor.session import Session, save_session

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "tuned_mlp_cpu"


def test_a_stopped_session_is_in_the_history(tmp_path: Path):
    out = tmp_path / "perfdoctor-runs"
    session_dir = out / "20260101-000000-tuned_mlp"
    shutil.copytree(FIXTURE, session_dir / "baseline")
    session = Session(
        target=Target(kind="script", name="tuned_mlp.py", argv=("--lr", "0.1")),
        cwd=str(tmp_path),
        plan=StepPlan(),
        seed=0,
        repeat=2,
        apply=True,
        created_at="2026-01-01T00:00:00+0000",
        baseline_runs=("baseline",),
        run_order=("baseline",),
    )
    save_session(session_dir, session)
    runner = SimpleNamespace(
        reported=False,
        current_run="cpu-threads",
        session=session,
        session_dir=session_dir,
        options=SimpleNamespace(runs_root=out),
    )
    stopped = pipeline._stopped(runner, Stopped(15, "SIGTERM"))  # type: ignore[arg-type]
    assert stopped.exit_code == 143
    (row,) = list_sessions(out)
    assert row.session == session_dir.name
    assert row.interrupted and row.status == "interrupted"
    assert row.argv == ("--lr", "0.1")


def test_tensorboard_says_its_profiler_tab_needs_the_internet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from perfdoctor import tensorboard_launch
    from perfdoctor.cli import app

    session_dir = tmp_path / "s"
    shutil.copytree(FIXTURE, session_dir / "baseline")

    def no_server(*_args, **_kwargs):
        raise tensorboard_launch.TensorBoardFailed("not started in this test")

    monkeypatch.setattr(tensorboard_launch, "profiler_plugin_installed", lambda: True)
    monkeypatch.setattr(tensorboard_launch, "start_tensorboard", no_server)
    got = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["tensorboard", str(session_dir)])
    assert got.exit_code == 69
    assert "needs internet access" in got.stdout
    assert f"perfdoctor view {session_dir}" in got.stdout
