"""The pipeline sizes the candidates whose catalog entry has a sizing hook (DataLoader
workers, from the baseline's measured split) and passes each sizing to the runs that
apply that optimization (and only to those), through RunSpec.env."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor import pipeline, run_schema
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
    return SimpleNamespace(
        facts=facts, record=SimpleNamespace(observed=run_schema.observations(observations))
    )


REASON = "data 51 ms/batch vs 4.1 ms compute; 14 workers on 16 cores"
KEPT = "intra-op threads stay as the script has them"


@pytest.fixture(autouse=True)
def no_user_sizing(monkeypatch):
    for name in (WORKERS_ENV, WORKERS_WHY_ENV):
        monkeypatch.delenv(name, raising=False)


def test_sized_from_the_baseline_with_the_childs_cores():
    sink = Notes()
    sizings = pipeline._sizings(diagnosis(GPU_FACTS), ["pin-memory", "dataloader-workers"], sink)
    predicted = "data 51 + compute 4.1 ms/batch -> 4.1 ms/batch with 14 workers"
    assert sizings == {
        "dataloader-workers": WorkerSizing(
            14, REASON, KEPT, predicted_speedup=13.488, predicted_from=predicted
        )
    }
    assert sink.notes == [f"dataloader-workers: num_workers=14 ({REASON}); {KEPT}"]


def test_not_sized_when_not_tried_or_set_by_the_user(monkeypatch):
    assert pipeline._sizings(diagnosis(GPU_FACTS), ["pin-memory"], Notes()) == {}
    monkeypatch.setenv(WORKERS_ENV, "8")  # the user's own choice reaches the child as it is
    assert pipeline._sizings(diagnosis(GPU_FACTS), ["dataloader-workers"], Notes()) == {}


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
    runner.sizings = {"dataloader-workers": WorkerSizing(14, REASON, KEPT)}
    runner.run("baseline", (), repeat=1, planned_runs=3)
    runner.run("dataloader-workers", ("dataloader-workers",), repeat=1, planned_runs=3)
    runner.run("stacked", ("pin-memory", "dataloader-workers"), repeat=1, planned_runs=3)
    runner.run("pin-memory", ("pin-memory",), repeat=1, planned_runs=3)
    envs = [dict(spec.env) for spec in runner.specs]
    wanted = {WORKERS_ENV: "14", WORKERS_WHY_ENV: REASON}  # nothing about threads
    assert envs[0] == {}
    assert envs[1] == wanted and envs[2] == wanted
    assert WORKERS_ENV not in envs[3]


def test_the_workers_variant_carries_what_the_split_predicted(runner):
    """The session keeps the prediction so the report can check it against the measurement
    (optimize/prediction.py); the stack and the peels carry none."""
    from perfdoctor.session import VariantPlan

    runner.sizings = {
        "dataloader-workers": WorkerSizing(14, REASON, KEPT, None, False, 1.9, "data 51 ...")
    }
    alone = runner._with_prediction(VariantPlan("dataloader-workers", ("dataloader-workers",)))
    assert (alone.predicted_speedup, alone.predicted_from) == (1.9, "data 51 ...")
    stack = VariantPlan("stacked", ("dataloader-workers", "cpu-threads"), stacked=True)
    assert runner._with_prediction(stack) is stack
