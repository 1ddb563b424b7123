"""The end of the plan: by default PlanComplete stops the script at its next training event;
with --run-to-end (StepTracker(run_to_end=True)) the script goes on and nothing more is
recorded. Driven with a fake clock, as a real script's hooks would."""

from __future__ import annotations

import pytest

from perfdoctor.collect.probes_steps import ClosedStep, PlanComplete, StepTracker


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
