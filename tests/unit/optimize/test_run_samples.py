"""Child run directories -> RunSample, through the one loader (analyze.record.load_run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfdoctor import rundir
from perfdoctor.errors import BadRunDir, CorruptArtifact
from perfdoctor.model import RunManifest, StepRecord
from perfdoctor.optimize.run_samples import load_run_samples


def _manifest(path: Path, label: str = "baseline") -> None:
    path.mkdir(parents=True, exist_ok=True)
    manifest = RunManifest(
        label=label, status="completed", exit_code=0, wall_s=3.0,
        steps_seen=4, step_detection="optimizer", plan_complete=True,
    )  # fmt: skip
    rundir.write_json(path / rundir.MANIFEST_FILE, manifest)


def test_run_sample_from_a_run_directory(tmp_path: Path) -> None:
    _manifest(tmp_path, "dataloader-workers")
    rundir.write_json(
        tmp_path / rundir.OBSERVATIONS_FILE,
        {"applied": [{"id": "dataloader-workers", "applied": True, "verified": True,
                      "detail": "train.py:40: num_workers 0 -> 2"}]},
    )  # fmt: skip
    rundir.append_jsonl(
        tmp_path / rundir.STEPS_FILE,
        [
            StepRecord(index=i, phase=phase, wall_ms=ms, loss=loss, batch_size=16, rss_bytes=rss)
            for i, (phase, ms, loss, rss) in enumerate(
                [("warmup", 90.0, 2.0, 100), ("timed", 50.0, 1.9, 300),
                 ("timed", 52.0, 1.8, 200), ("profiled", 80.0, 1.7, 250)]
            )
        ],
    )  # fmt: skip
    rundir.append_jsonl(
        tmp_path / rundir.STEPS_FILE,
        [{"index": 4, "phase": "profiled", "wall_ms": 80.0, "loss": None, "loss_finite": False}],
    )
    (sample,) = load_run_samples([tmp_path])
    assert sample.label == "dataloader-workers" and sample.usable
    assert sample.step_ms == (50.0, 52.0)
    assert sample.losses[:4] == (2.0, 1.9, 1.8, 1.7)
    assert math.isnan(sample.losses[4])  # a NaN loss, stored as null + loss_finite false
    assert sample.samples_per_step == 16 and sample.peak_memory_bytes == 300
    assert sample.applied[0].detail == "train.py:40: num_workers 0 -> 2"
    assert sample.energy_j_per_step is None  # no GPU samples


def test_a_run_of_several_ranks_is_timed_by_its_slowest_rank_and_guards_every_loss(
    tmp_path: Path,
) -> None:
    def steps(path: Path, rows: list[tuple[int, str, float, float]]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        rundir.append_jsonl(
            path / rundir.STEPS_FILE,
            [StepRecord(index=i, phase=ph, wall_ms=ms, loss=loss) for i, ph, ms, loss in rows],
        )

    _manifest(tmp_path)
    steps(tmp_path, [(0, "warmup", 9.0, 2.0), (1, "timed", 5.0, 1.9), (2, "timed", 5.0, 1.8)])
    steps(rundir.rank_dir(tmp_path, 1), [(0, "warmup", 9.0, 2.2), (1, "timed", 7.0, 2.1)])
    rundir.append_jsonl(
        rundir.rank_dir(tmp_path, 1) / rundir.STEPS_FILE,
        [{"index": 2, "phase": "timed", "wall_ms": 4.0, "loss": None, "loss_finite": False}],
    )
    (sample,) = load_run_samples([tmp_path])
    assert sample.step_ms == (7.0, 5.0)  # step 1: rank 1 was slower; step 2: rank 0
    assert sample.losses[:2] == pytest.approx((2.1, 2.0))  # the ranks' mean
    assert math.isnan(sample.losses[2])  # a NaN on rank 1 is the step's NaN


def test_a_directory_that_is_no_run_is_an_error_not_an_empty_sample(tmp_path: Path) -> None:
    with pytest.raises(BadRunDir):
        load_run_samples([tmp_path])


def test_unreadable_observations_are_an_error_not_an_empty_sample(tmp_path: Path) -> None:
    _manifest(tmp_path)
    (tmp_path / rundir.OBSERVATIONS_FILE).write_text("{not json")
    with pytest.raises(CorruptArtifact):
        load_run_samples([tmp_path])
    (tmp_path / rundir.OBSERVATIONS_FILE).write_text(json.dumps(["not", "an", "object"]))
    with pytest.raises(CorruptArtifact):
        load_run_samples([tmp_path])
