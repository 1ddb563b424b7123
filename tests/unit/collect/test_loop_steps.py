"""Per-step loop costs in the step state machine (collect/probes_steps.py, loop_probes.py):
an evaluation or a rollout between optimizer steps lands in the next step, named."""

from __future__ import annotations

import pytest

from perfdoctor.collect.loop_probes import loop_fields
from perfdoctor.collect.probes_steps import StepTracker
from tests.unit.collect.test_closure_steps import Clock, Listener


def train_step(tracker: StepTracker, clock: Clock) -> None:
    t0 = tracker.forward_start()
    clock.advance(0.002)
    tracker.forward_end(t0)
    t0 = tracker.backward_start()
    clock.advance(0.003)
    tracker.backward_end(t0, None)
    t0 = tracker.optimizer_start("opt")
    clock.advance(0.001)
    tracker.optimizer_end("opt", t0)


def test_eval_rollout_and_checkpoint_time_land_in_the_next_step() -> None:
    clock, listener = Clock(), Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=clock)
    tracker.optimizer_constructed()
    train_step(tracker, clock)
    for kind in ("eval", "eval", "no_grad"):  # evaluation, then a rollout's forward
        t0 = tracker.forward_start()
        clock.advance(0.010)
        tracker.forward_end(t0, kind)
    tracker.save_time(0.004)
    clock.advance(0.004)
    train_step(tracker, clock)
    train_step(tracker, clock)
    first, second = listener.closed[:2]
    assert loop_fields(first) == {}
    assert second.eval_forward_s == pytest.approx(0.020)
    assert second.nograd_forward_s == pytest.approx(0.010)
    assert loop_fields(second) == pytest.approx(
        {"eval_forward_ms": 20.0, "nograd_forward_ms": 10.0, "save_ms": 4.0}
    )
    assert second.wall_s == pytest.approx(0.030 + 0.004 + 0.006)
