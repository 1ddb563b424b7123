"""Optimizer appliers in-process on CPU: fused kernels, zero_grad(set_to_none=True)."""

from __future__ import annotations

import pytest
import torch
from appliers_support import Harness, Mlp, batches, seeded


def test_fused_adamw_verified_with_identical_trajectory(harness_factory):
    data = batches((4, 8))
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(
        model, torch.optim.AdamW(model.parameters(), lr=1e-2), data, steps=6
    )

    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.AdamW((p for p in model.parameters()), lr=1e-2)  # a generator, read once
    assert opt.param_groups[0]["fused"] is True
    assert len(opt.param_groups[0]["params"]) == 4
    losses = harness.train(model, opt, data, steps=6)

    row = harness.results()["fused-optimizer"]
    assert row["applied"] and row["verified"], row
    assert "AdamW(fused=True)" in row["detail"]
    assert losses == pytest.approx(base_losses, rel=1e-5)


def test_fused_respects_the_scripts_implementation_choice(harness_factory):
    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=False)
    assert not opt.param_groups[0]["fused"]
    row = harness.results()["fused-optimizer"]
    assert row["applied"] is False and "kept the script's fused=False" in row["detail"]


def test_a_single_tensor_choice_is_replaced_and_switches_back(harness_factory):
    """foreach=False alone is the single-tensor loop the finding names: fused runs beside
    it, and switched off the optimizer is the script's single-tensor one again."""
    data = batches((4, 8))
    model = seeded(Mlp)
    plain = Harness(()).train(
        model, torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False), data, steps=4
    )
    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    assert opt.param_groups[0]["fused"] is True and opt.param_groups[0]["foreach"] is False
    losses = harness.train(model, opt, data, steps=4)
    row = harness.results()["fused-optimizer"]
    assert row["applied"] and row["verified"], row
    assert "Adam(fused=True) in place of the script's foreach=False" in row["detail"]
    assert losses == pytest.approx(plain, rel=1e-5)
    harness.applier("fused-optimizer").switch(False)
    assert not opt.param_groups[0]["fused"] and opt.param_groups[0]["foreach"] is False


def test_fused_leaves_subclasses_and_param_groups_correct(harness_factory):
    class MyAdam(torch.optim.Adam):
        pass

    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    assert not MyAdam(model.parameters()).param_groups[0]["fused"]
    groups = [
        {"params": model.fc1.parameters(), "lr": 0.1},
        {"params": list(model.fc2.parameters())},
    ]
    sgd = torch.optim.SGD(groups, lr=0.01)
    assert [g["lr"] for g in sgd.param_groups] == [0.1, 0.01]
    assert [len(g["params"]) for g in sgd.param_groups] == [2, 2]
    assert sgd.param_groups[0]["fused"] is True
    harness.close()
    assert not torch.optim.SGD(model.parameters(), lr=0.1).param_groups[0]["fused"]


def test_fused_refused_for_non_float_params(harness_factory):
    harness = harness_factory("fused-optimizer")
    weights = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    opt = torch.optim.SGD([weights], lr=0.1)
    assert not opt.param_groups[0]["fused"]
    row = harness.results()["fused-optimizer"]
    assert row["applied"] is False and "not floating point" in row["detail"]


def test_zero_grad_false_becomes_set_to_none(harness_factory):
    harness = harness_factory("zero-grad-set-to-none")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    harness.train(
        model, opt, batches((4, 8)), steps=4, zero_grad=lambda: opt.zero_grad(set_to_none=False)
    )
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is None for p in model.parameters())
    row = harness.results()["zero-grad-set-to-none"]
    assert row["applied"] and row["verified"], row
    assert "asked set_to_none=False" in row["detail"]


def test_zero_grad_never_called_is_not_verified(harness_factory):
    harness = harness_factory("zero-grad-set-to-none")
    row = harness.results()["zero-grad-set-to-none"]
    assert row["applied"] is True and row["verified"] is False
    assert "never called" in row["detail"]
