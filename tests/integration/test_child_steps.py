"""The step state machine (collect/probes_steps.py), driven with a fake clock: no torch.

Each test replays the event sequence a real script produces (see the comments) and checks
how many steps come out, what each holds, and which signal was used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from perfdoctor.collect.probes_steps import ClosedStep, PlanComplete, StepTracker


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Listener:
    started: list[int] = field(default_factory=list)
    closed: list[ClosedStep] = field(default_factory=list)
    modes: list[tuple[str, str | None]] = field(default_factory=list)
    finished: int = 0

    def step_started(self, index: int) -> None:
        self.started.append(index)

    def step_closed(self, step: ClosedStep) -> None:
        self.closed.append(step)

    def plan_finished(self) -> None:
        self.finished += 1

    def mode_changed(self, mode: str, note: str | None) -> None:
        self.modes.append((mode, note))


def make(plan_total: int | None = None, window: float = 1.0) -> tuple[StepTracker, Listener, Clock]:
    listener, clock = Listener(), Clock()
    tracker = StepTracker(listener, plan_total=plan_total, time_window_s=window, clock=clock)
    return tracker, listener, clock


def fetch(tracker: StepTracker, clock: Clock, wait: float = 0.0, batch: int | None = 4) -> None:
    t0 = tracker.data_start()
    clock.advance(wait)
    tracker.data_end(t0, batch)


def forward(tracker: StepTracker, clock: Clock, cost: float = 0.0) -> None:
    t0 = tracker.forward_start()
    clock.advance(cost)
    tracker.forward_end(t0)


def backward(tracker: StepTracker, clock: Clock, loss: float | None = 1.0, cost: float = 0.0):
    t0 = tracker.backward_start()
    clock.advance(cost)
    tracker.backward_end(t0, loss)


def opt_step(tracker: StepTracker, clock: Clock, key: str, cost: float = 0.0) -> None:
    t0 = tracker.optimizer_start(key)
    clock.advance(cost)
    tracker.optimizer_end(key, t0)


def test_single_optimizer_with_a_dataloader_splits_time_by_phase() -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    for _ in range(3):
        fetch(tracker, clock, wait=0.002)
        forward(tracker, clock, cost=0.003)
        backward(tracker, clock, loss=0.5, cost=0.004)
        opt_step(tracker, clock, "opt", cost=0.001)
    fetch(tracker, clock)  # the next iteration closes the third step
    assert [s.index for s in listener.closed] == [0, 1, 2]
    step = listener.closed[1]
    assert step.data_s == pytest.approx(0.002)
    assert step.forward_s == pytest.approx(0.003)
    assert step.backward_s == pytest.approx(0.004)
    assert step.optimizer_s == pytest.approx(0.001)
    assert step.wall_s == pytest.approx(0.010)
    assert (step.micro_batches, step.losses, step.batch_size) == (1, (0.5,), 4)
    assert tracker.mode == "optimizer"
    assert listener.started == [0, 1, 2, 3]


def test_gradient_accumulation_counts_micro_batches_per_optimizer_step() -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    for _ in range(2):
        for micro in range(4):
            fetch(tracker, clock)
            forward(tracker, clock)
            backward(tracker, clock, loss=float(micro))
        opt_step(tracker, clock, "opt")
    fetch(tracker, clock)
    assert [s.micro_batches for s in listener.closed] == [4, 4]
    assert listener.closed[0].losses == (0.0, 1.0, 2.0, 3.0)
    assert tracker.mode == "optimizer"


def gan_iteration(tracker: StepTracker, clock: Clock, *, loader: bool) -> None:
    if loader:
        fetch(tracker, clock)
    forward(tracker, clock)  # G(z)
    forward(tracker, clock)  # D(real)
    forward(tracker, clock)  # D(fake.detach())
    backward(tracker, clock)
    opt_step(tracker, clock, "D")
    forward(tracker, clock)  # D(fake) for G's loss
    backward(tracker, clock)
    opt_step(tracker, clock, "G")


@pytest.mark.parametrize("loader", [True, False])
def test_two_optimizers_stepping_each_iteration_count_once(loader: bool) -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    tracker.optimizer_constructed()
    for _ in range(6):
        gan_iteration(tracker, clock, loader=loader)
    tracker.finish()
    assert len(listener.closed) == 6
    # Steady state: every step holds one D step, one G step and both backward calls.
    assert all(s.micro_batches == 2 for s in listener.closed[1:])


def test_gan_with_a_dataloader_keeps_each_iteration_whole() -> None:
    tracker, listener, clock = make()
    for _ in range(4):
        gan_iteration(tracker, clock, loader=True)
    fetch(tracker, clock)
    assert [s.micro_batches for s in listener.closed] == [2, 2, 2, 2]
    assert [s.forward_calls for s in listener.closed] == [4, 4, 4, 4]
    assert {s.closed_by for s in listener.closed} == {"data"}


def test_critic_stepping_more_often_than_the_generator_counts_critic_iterations() -> None:
    # WGAN: the critic steps every iteration, the generator every third one.
    tracker, listener, clock = make()
    for i in range(9):
        forward(tracker, clock)
        backward(tracker, clock)
        opt_step(tracker, clock, "critic")
        if i % 3 == 2:
            forward(tracker, clock)
            backward(tracker, clock)
            opt_step(tracker, clock, "generator")
    tracker.finish()
    assert len(listener.closed) == 9


def test_skipped_fp16_steps_still_end_iterations_through_the_scaler() -> None:
    # GradScaler skips optimizer.step on inf gradients, but update() runs every iteration.
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    for i in range(5):
        fetch(tracker, clock)
        forward(tracker, clock)
        backward(tracker, clock)
        if i not in (0, 1):
            opt_step(tracker, clock, "opt")
        tracker.scaler_update("scaler")
    fetch(tracker, clock)
    assert len(listener.closed) == 5
    assert tracker.mode == "optimizer"


def test_no_optimizer_falls_back_to_backward_calls() -> None:
    tracker, listener, clock = make()
    for _ in range(4):
        forward(tracker, clock)
        backward(tracker, clock)
    forward(tracker, clock)
    assert tracker.mode == "backward"
    assert len(listener.closed) == 4
    assert all(s.micro_batches == 1 for s in listener.closed)


def test_unused_optimizer_and_cleared_gradients_fall_back_to_backward_calls() -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()  # constructed, never stepped: manual updates
    for _ in range(3):
        tracker.zero_grad()
        forward(tracker, clock)
        backward(tracker, clock)
    forward(tracker, clock)
    assert tracker.mode == "backward"
    assert listener.modes[0][0] == "backward"
    assert len(listener.closed) == 3


def test_forward_only_script_uses_time_windows() -> None:
    tracker, listener, clock = make(window=0.5)
    for _ in range(20):
        forward(tracker, clock, cost=0.1)
    assert tracker.mode == "time"
    # 2 s of forwards: the first step holds the detection period, later ones one window.
    assert len(listener.closed) >= 2
    assert all(s.wall_s >= 0.5 for s in listener.closed)
    assert all(s.micro_batches == 0 for s in listener.closed)


def test_plan_end_stops_at_the_next_iteration_start_and_keeps_stopping() -> None:
    tracker, listener, clock = make(plan_total=2)
    tracker.optimizer_constructed()
    for _ in range(2):
        fetch(tracker, clock)
        forward(tracker, clock)
        backward(tracker, clock)
        opt_step(tracker, clock, "opt")
    with pytest.raises(PlanComplete):
        fetch(tracker, clock)
    assert listener.finished == 1
    assert [s.index for s in listener.closed] == [0, 1]
    # A script that swallowed it (bare except) is stopped again at its next iteration.
    with pytest.raises(PlanComplete):
        forward(tracker, clock)
    with pytest.raises(PlanComplete):
        backward(tracker, clock)
    tracker.finish()
    assert len(listener.closed) == 2


def test_plan_complete_passes_through_except_exception() -> None:
    tracker, _, clock = make(plan_total=1)
    tracker.optimizer_constructed()
    fetch(tracker, clock)
    opt_step(tracker, clock, "opt")
    with pytest.raises(PlanComplete):
        try:
            fetch(tracker, clock)
        except Exception:  # what a script's own error handling would do
            pytest.fail("PlanComplete must not be an Exception")


def test_finish_keeps_a_whole_last_step_and_drops_a_partial_one() -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    for _ in range(2):
        fetch(tracker, clock)
        forward(tracker, clock)
        backward(tracker, clock)
        opt_step(tracker, clock, "opt")
    tracker.finish()  # the script ended right after its last optimizer step
    assert len(listener.closed) == 2

    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    fetch(tracker, clock)
    forward(tracker, clock)
    backward(tracker, clock)
    opt_step(tracker, clock, "opt")
    fetch(tracker, clock)
    forward(tracker, clock)  # crashed here, before its optimizer step
    tracker.finish()
    assert len(listener.closed) == 1


def test_nothing_is_timed_before_the_first_event() -> None:
    tracker, listener, clock = make()
    clock.advance(5.0)  # imports, model construction
    tracker.optimizer_constructed()
    fetch(tracker, clock, wait=0.01)
    opt_step(tracker, clock, "opt")
    fetch(tracker, clock)
    assert listener.closed[0].wall_s == pytest.approx(0.01)


def test_batch_size_is_what_the_root_received_else_the_dataloader_batch() -> None:
    def root_forward(tracker: StepTracker, batch: int) -> None:
        t0 = tracker.forward_start()  # the order of the root pre-hook
        tracker.input_batch(batch)
        tracker.forward_end(t0)

    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    fetch(tracker, clock, batch=32)
    root_forward(tracker, 8)  # a slice of the batch: what the model trained on (issue 13)
    opt_step(tracker, clock, "opt")
    fetch(tracker, clock, batch=None)  # a batch without tensors
    root_forward(tracker, 16)
    opt_step(tracker, clock, "opt")
    fetch(tracker, clock, batch=24)  # a model whose input has no tensor (a dict of lists)
    opt_step(tracker, clock, "opt")
    tracker.finish()
    assert [s.batch_size for s in listener.closed] == [8, 16, 24]


def test_an_evaluation_before_the_first_training_step_keeps_optimizer_steps() -> None:
    """nanoGPT's estimate_loss() at iteration 0: a second of forwards under no_grad before
    the first backward. Steps are training steps: no switch to time windows."""
    tracker, listener, clock = make(plan_total=6, window=0.2)
    tracker.optimizer_constructed()
    for _ in range(40):  # 2 s of evaluation, ten time windows long
        forward(tracker, clock, cost=0.05)
    with pytest.raises(PlanComplete):
        for _ in range(10):
            forward(tracker, clock, cost=0.01)
            backward(tracker, clock, cost=0.02)
            opt_step(tracker, clock, "opt", cost=0.01)
    assert tracker.mode == "optimizer"
    assert [mode for mode, _ in listener.modes] == ["optimizer"]
    assert len(listener.closed) == 6
    # The evaluation lands in the first (warm-up) step; every later step is one iteration.
    assert [s.forward_calls for s in listener.closed[1:]] == [1] * 5
    assert all(s.wall_s == pytest.approx(0.04) for s in listener.closed[1:])


def test_leaving_time_windows_says_why() -> None:
    tracker, listener, clock = make(window=0.2)
    for _ in range(10):
        forward(tracker, clock, cost=0.1)
    assert tracker.mode == "time"
    backward(tracker, clock)
    tracker.optimizer_constructed()
    opt_step(tracker, clock, "opt")
    assert listener.modes[-1][0] == "optimizer"
    assert listener.modes[-1][1]  # a reason, never None


def test_each_closure_call_of_a_closure_optimizer_is_a_step() -> None:
    tracker, listener, clock = make()
    tracker.optimizer_constructed()
    for _call in range(2):  # two optimizer.step(closure) calls, 5 evaluations each
        t0 = tracker.optimizer_start("lbfgs")
        for _ in range(5):
            tracker.closure_call("lbfgs")
            forward(tracker, clock, cost=0.01)
            backward(tracker, clock, cost=0.02)
        tracker.optimizer_end("lbfgs", t0)
    tracker.finish()
    assert len(listener.closed) == 10
    assert all(s.forward_calls == 1 and s.micro_batches == 1 for s in listener.closed)
    assert all(s.optimizer_s == 0.0 for s in listener.closed)  # the call spans all of them
    assert all(s.wall_s == pytest.approx(0.03) for s in listener.closed)
