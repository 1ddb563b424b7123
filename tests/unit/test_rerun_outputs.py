"""What perfdoctor's re-runs leave in the script's log folders, found and removed; nothing
else is touched."""

from __future__ import annotations

import os
from pathlib import Path

from perfdoctor import rerun_outputs


def make(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")


def test_new_entries_of_log_folders_are_found_and_removed(tmp_path: Path) -> None:
    make(tmp_path, "lightning_logs/version_0/", "outputs/2026-11-24/10-00-00/", "model.pt")
    before = rerun_outputs.snapshot(tmp_path)
    # The re-run: a new Lightning version, a Hydra run in today's folder, a SummaryWriter
    # folder, a file the script writes beside them, and a new file in an existing entry.
    make(
        tmp_path,
        "lightning_logs/version_1/metrics.csv",
        "outputs/2026-11-24/10-05-00/.hydra/config.yaml",
        "runs/Nov24_10-05-00_host/events.out",
        "checkpoint-new.pt",
        "lightning_logs/version_0/more.csv",
    )
    created = rerun_outputs.created_since(before, rerun_outputs.snapshot(tmp_path))
    assert created == [
        os.path.join("lightning_logs", "version_0", "more.csv"),
        os.path.join("lightning_logs", "version_1"),
        os.path.join("outputs", "2026-11-24", "10-05-00"),
        "runs",
    ]
    assert rerun_outputs.remove(tmp_path, created) == created
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert sorted(p.name for p in (tmp_path / "lightning_logs/version_0").iterdir()) == []
    assert not (tmp_path / "runs").exists()
    assert (tmp_path / "checkpoint-new.pt").is_file()  # not a log folder: never touched
    assert (tmp_path / "model.pt").is_file()


def test_log_folders_one_level_down_and_the_runs_root_excluded(tmp_path: Path) -> None:
    make(tmp_path, "out/lightning_logs/", "runs/20261124-session/")
    before = rerun_outputs.snapshot(tmp_path, exclude=[tmp_path / "runs"])
    make(tmp_path, "out/lightning_logs/version_0/hparams.yaml", "runs/20261124-next/")
    after = rerun_outputs.snapshot(tmp_path, exclude=[tmp_path / "runs"])
    assert rerun_outputs.created_since(before, after) == [
        os.path.join("out", "lightning_logs", "version_0")
    ]


def test_never_outside_the_working_directory(tmp_path: Path) -> None:
    inside = tmp_path / "cwd"
    make(inside, "lightning_logs/")
    make(tmp_path, "precious/")
    assert rerun_outputs.remove(inside, ["../precious", "."]) == []
    assert (tmp_path / "precious").is_dir() and inside.is_dir()


def test_the_pipeline_keeps_the_first_runs_outputs_and_removes_the_reruns(
    tmp_path: Path, monkeypatch
) -> None:
    from perfdoctor import pipeline
    from perfdoctor.model import RunManifest, StepPlan, Target
    from perfdoctor.session import Session

    def fake_launch(spec, **_kwargs):
        logs = Path(spec.cwd) / "lightning_logs"
        version = len(list(logs.iterdir())) if logs.is_dir() else 0
        make(Path(spec.cwd), f"lightning_logs/version_{version}/metrics.csv")
        return RunManifest(
            label=spec.label, status="completed", exit_code=0, wall_s=1.0, steps_seen=3,
            step_detection="optimizer", plan_complete=True,
        )  # fmt: skip

    monkeypatch.setattr("perfdoctor.collect.launcher.launch", fake_launch)
    target = Target(kind="script", name="train.py")
    runs = tmp_path / "runs"
    runs.mkdir()
    options = pipeline.ProfileOptions(target=target, cwd=tmp_path, runs_root=runs)
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=0, repeat=2, apply=True,
        created_at="",
    )  # fmt: skip
    runner = pipeline._Runner(options, runs, session, pipeline.ProgressSink())
    runner.run("baseline", (), repeat=1, planned_runs=3)
    runner.run("pin-memory", ("pin-memory",), repeat=1, planned_runs=3)
    runner.run("baseline", (), repeat=2, planned_runs=3)
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert runner.session.removed_outputs == (
        os.path.join("lightning_logs", "version_1"),
        os.path.join("lightning_logs", "version_1"),
    )
