"""After a plan that lets the script run to its end (`--run-to-end`), the per-step wrappers
of collect/probes_hooks.py call straight through: nothing reaches the step tracker any
more, and only each optimizer's count of steps goes on (the manifest's steps_run). Going
through the tracker to learn that it had stopped cost the null step ~36 us a step
(benchmarks/README.md, session 9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.optim import optimizer as optimizer_mod

from perfdoctor.collect import probes_hooks
from perfdoctor.collect.probes_steps import ClosedStep, StepTracker
from tests.unit.collect.test_step_clocks import _probes

PLAN = 3


class PlanEndsLikeProbes:
    """The tracker's listener, ending the plan as Probes.plan_finished does with
    --run-to-end (that part is tested on a real Probes below)."""

    def __init__(self) -> None:
        self.closed: list[ClosedStep] = []
        self.hooks_live = [True]

    def step_started(self, index: int) -> None:
        pass

    def step_closed(self, step: ClosedStep) -> None:
        self.closed.append(step)

    def plan_finished(self) -> None:
        self.hooks_live[0] = False

    def mode_changed(self, mode: str, note: str | None) -> None:
        pass


class CountingTracker(StepTracker):
    """A StepTracker that counts the calls the wrappers make into it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = 0

    def backward_start(self) -> float:
        self.calls += 1
        return super().backward_start()

    def optimizer_start(self, key: Any) -> float:
        self.calls += 1
        return super().optimizer_start(key)

    def optimizer_end(self, key: Any, t0: float) -> None:
        self.calls += 1
        super().optimizer_end(key, t0)


@pytest.fixture
def wrapped(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CountingTracker, Any]]:
    """The real backward, zero_grad and optimizer hooks over a tracker with a 3-step plan
    and --run-to-end; torch's own functions and global optimizer hooks put back after."""
    for owner, name in (
        (torch.Tensor, "backward"),
        (torch.autograd, "backward"),
        (torch.optim.Optimizer, "__init__"),
        (torch.optim.Optimizer, "zero_grad"),
        (torch.nn.Module, "zero_grad"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    hook_dicts = (
        optimizer_mod._global_optimizer_pre_hooks,
        optimizer_mod._global_optimizer_post_hooks,
    )
    before = [set(hooks) for hooks in hook_dicts]
    listener = PlanEndsLikeProbes()
    tracker = CountingTracker(listener, plan_total=PLAN, time_window_s=1.0, run_to_end=True)
    probes: Any = SimpleNamespace(
        tracker=tracker,
        nvtx=None,
        hooks_live=listener.hooks_live,
        user_code=SimpleNamespace(caller=lambda frame: None),
        optimizer_steps={},
        roots=SimpleNamespace(resolved=True),
        optimizer_constructed=lambda opt, where: tracker.optimizer_constructed(),
        zero_grad_calls=0,
        zero_grad_called=lambda set_to_none: None,
    )
    never_compiling = lambda: False  # noqa: E731
    probes_hooks._install_optimizer_hooks(probes, torch, never_compiling)
    probes_hooks._install_backward(probes, torch, never_compiling)
    probes_hooks._install_zero_grad(probes, torch, never_compiling)
    yield tracker, probes
    for hooks, keys in zip(hook_dicts, before, strict=True):
        for key in set(hooks) - keys:
            del hooks[key]


def test_after_the_plan_only_the_optimizer_steps_are_counted(
    wrapped: tuple[CountingTracker, Any],
) -> None:
    tracker, probes = wrapped
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    calls_at_plan_end = None
    for _ in range(10):
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
        if calls_at_plan_end is None and not probes.hooks_live[0]:
            calls_at_plan_end = tracker.calls
    assert tracker.stopped and not probes.hooks_live[0]
    assert calls_at_plan_end is not None
    assert tracker.calls == calls_at_plan_end  # the iterations after it: no call at all
    assert probes.optimizer_steps == {id(opt): 10}  # every step the script made
    assert model.weight.grad is not None  # the user's backward ran throughout


@pytest.mark.parametrize("run_to_end", [True, False])
def test_the_wrappers_stand_down_only_when_the_script_runs_on(
    tmp_path: Path, run_to_end: bool
) -> None:
    """Without --run-to-end the wrappers stay live: the next training event is where the
    tracker raises PlanComplete to stop the script."""
    probes = _probes(tmp_path, run_to_end=run_to_end)
    assert probes.hooks_live == [True]
    probes.plan_finished()
    assert probes.hooks_live == [not run_to_end]
    probes.step_log.close()
