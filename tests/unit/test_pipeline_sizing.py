"""The pipeline sizes DataLoader workers from the baseline and passes them to the runs that
add workers (and only to those), through RunSpec.env."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor import pipeline
from perfdoctor.model import Facts, RunManifest, StepPlan, Target
from perfdoctor.optimize.sizing import WORKERS_ENV, WORKERS_WHY_ENV, WorkerSizing
from perfdoctor.session import Session

GPU_FACTS = Facts({"device_is_cuda": True, "data_wait_ms_p50": 51.2, "step_ms_p50": 55.3})


class Notes(pipeline.ProgressSink):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def diagnosis(facts: Facts, cores: int | None = 16) -> SimpleNamespace:
    observations = {"cpu": {"logical_cores": 32, "affinity_cores": cores}} if cores else {}
    return SimpleNamespace(facts=facts, record=SimpleNamespace(observations=observations))


def test_sized_from_the_baseline_with_the_childs_cores(monkeypatch):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    sink = Notes()
    sizing = pipeline._worker_sizing(diagnosis(GPU_FACTS), ["dataloader-workers"], sink)
    assert sizing == WorkerSizing(14, "data 51 ms/batch vs 4.1 ms compute")
    assert sink.notes == ["dataloader-workers: num_workers=14 (data 51 ms/batch vs 4.1 ms compute)"]


def test_not_sized_when_not_tried_or_set_by_the_user(monkeypatch):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    assert pipeline._worker_sizing(diagnosis(GPU_FACTS), ["pin-memory"], Notes()) is None
    monkeypatch.setenv(WORKERS_ENV, "8")  # the user's own choice reaches the child as it is
    assert pipeline._worker_sizing(diagnosis(GPU_FACTS), ["dataloader-workers"], Notes()) is None


def test_cores_fall_back_to_this_process():
    assert pipeline._usable_cores(diagnosis(GPU_FACTS, cores=None)) >= 1


@pytest.fixture
def runner(tmp_path: Path, monkeypatch) -> pipeline._Runner:
    specs = []

    def fake_launch(spec, **_kwargs):
        specs.append(spec)
        return RunManifest(
            label=spec.label,
            status="completed",
            exit_code=0,
            wall_s=1.0,
            steps_seen=3,
            step_detection="optimizer",
            plan_complete=True,
        )

    monkeypatch.setattr("perfdoctor.collect.launcher.launch", fake_launch)
    target = Target(kind="script", name="train.py")
    options = pipeline.ProfileOptions(target=target, cwd=tmp_path, runs_root=tmp_path)
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=0, repeat=1, apply=True,
        created_at="",
    )  # fmt: skip
    made = pipeline._Runner(options, tmp_path, session, pipeline.ProgressSink())
    made.specs = specs  # type: ignore[attr-defined]
    return made


def test_only_runs_adding_workers_get_the_count(runner):
    runner.worker_sizing = WorkerSizing(14, "data 51 ms/batch vs 4.1 ms compute")
    runner.run("baseline", (), repeat=1, planned_runs=3)
    runner.run("dataloader-workers", ("dataloader-workers",), repeat=1, planned_runs=3)
    runner.run("stacked", ("pin-memory", "dataloader-workers"), repeat=1, planned_runs=3)
    runner.run("pin-memory", ("pin-memory",), repeat=1, planned_runs=3)
    envs = [dict(spec.env) for spec in runner.specs]
    wanted = {WORKERS_ENV: "14", WORKERS_WHY_ENV: "data 51 ms/batch vs 4.1 ms compute"}
    assert envs[0] == {}
    assert envs[1] == wanted and envs[2] == wanted
    assert WORKERS_ENV not in envs[3]
