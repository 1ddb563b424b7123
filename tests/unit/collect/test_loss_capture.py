"""The loss the backward wrapper (collect/probes_hooks.py) hands the step tracker.

A CPU loss is read at once and kept as a float: kept as a tensor until the step log's
flush, each step's loss storage stayed allocated among the step's large buffers, and the
MLP of benchmarks/_peer_steps.py mapped fresh pages every few steps (benchmarks/README.md,
session 8). The values written are the same either way.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from perfdoctor.collect import probes_hooks
from perfdoctor.collect.probes_steps import StepTracker
from perfdoctor.collect.step_log import NO_ARM, StepLog
from tests.unit.collect.test_closure_steps import Clock, Listener


@pytest.fixture
def tracked(monkeypatch: pytest.MonkeyPatch) -> tuple[StepTracker, Listener]:
    """The real backward wrappers installed over a tracker; torch's own put back after."""
    monkeypatch.setattr(torch.Tensor, "backward", torch.Tensor.backward)
    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)
    listener = Listener()
    tracker = StepTracker(listener, plan_total=None, time_window_s=1.0, clock=Clock())
    probes: Any = SimpleNamespace(tracker=tracker, nvtx=None, hooks_live=[True])
    probes_hooks._install_backward(probes, torch, lambda: False)
    tracker.optimizer_constructed()
    return tracker, listener


def train(tracker: StepTracker, steps: int, *, functional: bool = False) -> list[float]:
    weight = torch.ones(3, requires_grad=True)
    values = []
    for step in range(steps):
        loss = (weight * (step + 1)).sum()
        values.append(loss.item())
        if functional:
            torch.autograd.backward(loss)
        else:
            loss.backward()
        t0 = tracker.optimizer_start("opt")
        tracker.optimizer_end("opt", t0)
    return values


@pytest.mark.parametrize("functional", [False, True], ids=["Tensor.backward", "autograd"])
def test_a_cpu_loss_is_kept_as_its_value_not_its_tensor(
    tracked: tuple[StepTracker, Listener], functional: bool
) -> None:
    tracker, listener = tracked
    values = train(tracker, 4, functional=functional)
    closed = listener.closed
    assert len(closed) == 3  # the 4th step closes at the next iteration's first event
    for step, value in zip(closed, values, strict=False):
        assert step.losses == (value,)
        assert all(type(loss) is float for loss in step.losses)


def test_the_rows_hold_the_same_losses_as_from_the_tensors(
    tracked: tuple[StepTracker, Listener], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="perfdoctor.collect.step_log")
    tracker, listener = tracked
    values = train(tracker, 4)
    log = StepLog(tmp_path, 0.0)
    for step in listener.closed:
        log.add_step((step, "timed", None, None, None, False, None, None, NO_ARM))
    # A tensor loss (a device's, or one added before this change) beside the floats.
    tensor_step = listener.closed[0]
    tensor_step.losses = (torch.tensor(values[0]),)
    log.add_step((tensor_step, "timed", None, None, None, False, None, None, NO_ARM))
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [row["loss"] for row in rows] == pytest.approx([*values[:3], values[0]])
    # Read in one batch, floats and tensors together: not one by one after a failure (the
    # fallback that copies each device loss back on its own).
    assert "converting one by one" not in caplog.text


def test_a_loss_item_cannot_make_a_float_of_stays_a_detached_tensor(
    tracked: tuple[StepTracker, Listener],
) -> None:
    """A complex loss (backward given its gradient): float(item()) refuses, so the tensor is
    kept as before, detached from the user's graph, and the user's backward runs."""
    tracker, listener = tracked
    weight = torch.ones(2, dtype=torch.complex64, requires_grad=True)
    for _ in range(2):
        loss = (weight * (1 + 2j)).sum()
        loss.backward(torch.ones((), dtype=torch.complex64))
        t0 = tracker.optimizer_start("opt")
        tracker.optimizer_end("opt", t0)
    (kept,) = listener.closed[0].losses
    assert isinstance(kept, torch.Tensor) and not kept.requires_grad
    assert kept.item() == 2 * (1 + 2j)
    assert weight.grad is not None
