"""Optimizers that run a closure: forward and backward nested inside `optimizer.step`
(LBFGS, PyTorch Lightning's automatic optimization). The step state machine
(collect/probes_steps.py) is driven with a fake clock, as a real script's hooks would."""

from __future__ import annotations

from perfdoctor.collect.probes_steps import ClosedStep, StepTracker


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Listener:
    def __init__(self) -> None:
        self.closed: list[ClosedStep] = []

    def step_started(self, index: int) -> None:
        pass

    def step_closed(self, step: ClosedStep) -> None:
        self.closed.append(step)

    def plan_finished(self) -> None:
        pass

    def mode_changed(self, mode: str, note: str | None) -> None:
        pass


def forward_backward(tracker: StepTracker, clock: Clock, forward: float, backward: float) -> None:
    t0 = tracker.forward_start()
    clock.advance(forward)
    tracker.forward_end(t0)
    t0 = tracker.backward_start()
    clock.advance(backward)
    tracker.backward_end(t0, 1.0)


SCRIPT_CODE_S = 0.003  # training_step's own code, hooks, zero_grad: inside the closure


def closure(tracker: StepTracker, clock: Clock, forward: float, backward: float) -> None:
    """The closure as the pre-hook's wrapper (probes_closure.py) reports it."""
    t0 = tracker.closure_start()
    clock.advance(SCRIPT_CODE_S)
    forward_backward(tracker, clock, forward, backward)
    tracker.closure_end(t0)


def closure_step(
    tracker: StepTracker, clock: Clock, *, evaluations: int, update: float, fetch: float = 0.0
) -> None:
    """One iteration: optionally a DataLoader batch, then optimizer.step(closure), which
    evaluates the closure `evaluations` times around its own update work."""
    if fetch:
        t0 = tracker.data_start()
        clock.advance(fetch)
        tracker.data_end(t0, 8)
    t0 = tracker.optimizer_start("opt")
    for _ in range(evaluations):
        closure(tracker, clock, forward=0.010, backward=0.020)
        clock.advance(update / evaluations)
    tracker.optimizer_end("opt", t0)


def phases(step: ClosedStep) -> float:
    return step.data_s + step.forward_s + step.backward_s + step.optimizer_s


def test_lightning_closure_step_phases_add_up_to_the_step() -> None:
    clock, listener = Clock(), Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=clock)
    for _ in range(4):
        closure_step(tracker, clock, evaluations=1, update=0.005, fetch=0.002)
    tracker.finish()
    assert len(listener.closed) == 4
    for step in listener.closed:
        assert step.micro_batches == 1
        assert abs(step.forward_s - 0.010) < 1e-9
        assert abs(step.backward_s - 0.020) < 1e-9
        assert abs(step.optimizer_s - 0.005) < 1e-9  # the update alone
        # What is left is the script's own code inside the closure, no phase's.
        assert abs(step.wall_s - phases(step) - SCRIPT_CODE_S) < 1e-9


def test_closure_timed_apart_without_closure_steps_keeps_the_update_alone() -> None:
    """The tracker's timing of closures alone (no closure_call: a closure the step hook could
    not wrap as steps): several evaluations stay in one step, and the optimizer phase is
    the update alone. With the hook, each evaluation is a step (test_child_steps.py)."""
    clock, listener = Clock(), Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=clock)
    for _ in range(3):
        closure_step(tracker, clock, evaluations=4, update=0.008)
    tracker.finish()
    assert len(listener.closed) == 3
    for step in listener.closed:
        assert step.micro_batches == 4
        assert abs(step.forward_s - 0.040) < 1e-9
        assert abs(step.optimizer_s - 0.008) < 1e-9
        assert abs(step.wall_s - phases(step) - 4 * SCRIPT_CODE_S) < 1e-9


def test_forward_and_backward_nested_in_a_step_without_a_closure_are_taken_out() -> None:
    """An optimizer wrapper that runs the forward and backward inside its step() without
    handing a closure to the inner optimizer: their time is still not the optimizer's."""
    clock, listener = Clock(), Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=clock)
    for _ in range(3):
        t0 = tracker.optimizer_start("opt")
        forward_backward(tracker, clock, forward=0.010, backward=0.020)
        clock.advance(0.006)
        tracker.optimizer_end("opt", t0)
    tracker.finish()
    assert len(listener.closed) == 3
    for step in listener.closed:
        assert abs(step.optimizer_s - 0.006) < 1e-9
        assert abs(phases(step) - step.wall_s) < 1e-9


def test_a_plain_step_keeps_its_whole_optimizer_time() -> None:
    clock, listener = Clock(), Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=clock)
    for _ in range(3):
        forward_backward(tracker, clock, forward=0.010, backward=0.020)
        t0 = tracker.optimizer_start("opt")
        clock.advance(0.007)
        tracker.optimizer_end("opt", t0)
    tracker.finish()
    assert [round(s.optimizer_s, 9) for s in listener.closed] == [0.007] * 3
