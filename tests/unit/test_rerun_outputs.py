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
