"""The end of the plan: by default PlanComplete stops the script at its next training event;
with --run-to-end (StepTracker(run_to_end=True)) the script goes on and nothing more is
recorded. Driven with a fake clock, as a real script's hooks would."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.collect.probes_steps import ClosedStep, PlanComplete, StepTracker
from perfdoctor.model import RunManifest


class Listener:
    def __init__(self) -> None:
        self.closed: list[ClosedStep] = []
        self.finished = 0

    def step_started(self, index: int) -> None:
        pass

    def step_closed(self, step: ClosedStep) -> None:
        self.closed.append(step)

    def plan_finished(self) -> None:
        self.finished += 1

    def mode_changed(self, mode: str, note: str | None) -> None:
        pass


def iteration(tracker: StepTracker) -> None:
    """One training iteration: a batch, forward, backward, optimizer step."""
    t0 = tracker.data_start()
    tracker.data_end(t0, 8)
    t0 = tracker.forward_start()
    tracker.forward_end(t0)
    t0 = tracker.backward_start()
    tracker.backward_end(t0, 1.0)
    t0 = tracker.optimizer_start("opt")
    tracker.optimizer_end("opt", t0)


def tracker(listener: Listener, *, run_to_end: bool) -> StepTracker:
    made = StepTracker(listener, plan_total=3, time_window_s=1.0, run_to_end=run_to_end)
    made.optimizer_constructed()
    return made


def test_the_default_stops_the_script_after_the_plan() -> None:
    listener = Listener()
    steps = tracker(listener, run_to_end=False)
    with pytest.raises(PlanComplete):
        for _ in range(10):
            iteration(steps)
    assert len(listener.closed) == 3
    assert listener.finished == 1


def test_run_to_end_lets_the_script_finish_and_records_nothing_more() -> None:
    listener = Listener()
    steps = tracker(listener, run_to_end=True)
    for _ in range(10):  # the script's remaining iterations run, untouched
        iteration(steps)
    steps.finish()
    assert steps.stopped
    assert [s.index for s in listener.closed] == [0, 1, 2]
    assert listener.finished == 1


def _manifest_of(tmp_path: Path, *, run_to_end: bool, detection: str = "optimizer") -> RunManifest:
    """A completed child's manifest: 17 step rows (the plan), and the optimizer hooks'
    count of every optimizer.step the script made (80)."""
    import json

    from perfdoctor import rundir
    from perfdoctor.collect.manifest import write_manifest
    from perfdoctor.collect.supervision import ChildOutcome
    from perfdoctor.model import RunSpec, Target

    spec = RunSpec(
        label="baseline",
        target=Target(kind="script", name="train.py"),
        cwd=str(tmp_path),
        run_dir=str(tmp_path),
        run_to_end=run_to_end,
    )
    tmp_path.mkdir(parents=True)
    rows = "".join(json.dumps({"step": i, "phase": "timed"}) + "\n" for i in range(17))
    (tmp_path / rundir.STEPS_FILE).write_text(rows)
    observations = {
        "step_detection": detection,
        "steps_seen": 17,
        "plan_complete": True,
        "stopped_by_perfdoctor": not run_to_end,
        "optimizers": [{"class": "AdamW", "steps": 80}, {"class": "SGD", "steps": 0}],
    }
    (tmp_path / rundir.OBSERVATIONS_FILE).write_text(json.dumps(observations))
    return write_manifest(spec, tmp_path, ChildOutcome(exit_code=0, wall_s=1.0), 17)


def test_run_to_end_manifest_counts_the_steps_the_script_ran_in_all(tmp_path: Path) -> None:
    """The step rows stop at the plan; with --run-to-end the manifest keeps the optimizer's
    own count of the steps to the script's end, and only when a step is an optimizer step."""
    manifest = _manifest_of(tmp_path / "a", run_to_end=True)
    assert manifest.steps_seen == 17
    assert manifest.steps_run == 80
    assert _manifest_of(tmp_path / "b", run_to_end=False).steps_run is None
    assert _manifest_of(tmp_path / "c", run_to_end=True, detection="backward").steps_run is None
