"""The grad-use watch after the first steps (collect/probes_roots.py): a step's first
train-mode forward is watched one in GRAD_WATCH_EVERY, standing for that many; a model in
eval mode and a step's extra forwards (an evaluation or a rollout) are always watched.
Real torch hooks on a tiny model, the step state machine driven by hand as the hooks would."""

from __future__ import annotations

from pathlib import Path

import torch

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.probes_roots import GRAD_WATCH_EVERY, GRAD_WATCH_FIRST, RootFinder
from perfdoctor.collect.probes_steps import ClosedStep, StepTracker
from tests.unit.collect.test_closure_steps import Listener

HERE = Path(__file__).resolve().parent


class JudgingListener(Listener):
    """What Probes.step_closed does for the watch: judge a step's forwards a step later."""

    finder: RootFinder

    def step_closed(self, step: ClosedStep) -> None:
        super().step_closed(step)
        if self.finder.grad_use.pending:
            self.finder.grad_use.step_closed()


def test_sampled_first_forwards_stand_for_all_and_evaluations_are_all_seen(monkeypatch) -> None:
    # As in a process that compiled nothing: dynamo's frame counters are process-wide, and
    # another test of this worker may have compiled (the finder then keeps global hooks).
    monkeypatch.setattr(RootFinder, "_compiled_under_global_hooks", lambda self: False)
    listener = JudgingListener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0)
    finder = listener.finder = RootFinder(torch, tracker, UserCode.for_target(str(HERE), str(HERE)))
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tracker.optimizer_constructed()
    x = torch.randn(3, 4)
    assert finder.resolve([opt]) == [model]  # found in this frame's variables
    assert finder.hook_mode == "per-root"

    def train_step() -> None:
        loss = model(x).sum()
        t0 = tracker.backward_start()
        loss.backward()
        tracker.backward_end(t0, loss.detach())
        t0 = tracker.optimizer_start(opt)
        opt.step()
        tracker.optimizer_end(opt, t0)
        opt.zero_grad()

    steps = GRAD_WATCH_FIRST + 2 * GRAD_WATCH_EVERY
    for _ in range(steps):
        train_step()
    # Every one of the first forwards, then one in GRAD_WATCH_EVERY counted as that many.
    assert finder.grad_use.watched == steps
    assert finder.grad_use.first_forwards == steps

    for _ in range(3):  # an evaluation without no_grad, the model left in train mode
        model(x)  # EVAL-LINE
    model.eval()
    model(x)  # EVAL-MODE-LINE
    model.train()
    train_step()
    train_step()
    finder.grad_use.finish(script_ended_normally=True)

    summary = finder.grad_use.summary()
    # The evaluation's first forward opened a step, as a training step's would: it is
    # sampled like one (skipped here). Its other two and the eval-mode forward are seen.
    assert summary["grad_without_backward"] == 3
    lines = {loc["line"]: loc["count"] for loc in summary["locations"]}
    source = (HERE / "test_grad_use_sampling.py").read_text().splitlines()
    eval_line = next(i for i, text in enumerate(source, 1) if "# EVAL-LINE" in text)
    eval_mode_line = next(i for i, text in enumerate(source, 1) if "# EVAL-MODE-LINE" in text)
    assert lines == {eval_line: 2, eval_mode_line: 1}
    # Also seen: the training forward in the evaluation's step (its fifth forward). The next
    # step's first forward is the sampled kind again, and not one in GRAD_WATCH_EVERY.
    assert finder.grad_use.first_forwards == steps + 2
    assert (steps + 2) % GRAD_WATCH_EVERY
    assert finder.grad_use.watched == steps + 4
