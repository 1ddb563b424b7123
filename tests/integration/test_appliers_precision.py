"""Precision appliers in-process on CPU: bf16/fp16 autocast, GradScaler, TF32."""

from __future__ import annotations

import copy
import io
import math

import torch
from appliers_support import Harness, Mlp, batches, seeded
from torch.optim.optimizer import register_optimizer_step_post_hook

from perfdoctor.collect.appliers import base


def test_bf16_autocast_applies_from_iteration_two_and_outputs_fp32(harness_factory):
    harness = harness_factory("amp-bf16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    harness.train(model, opt, batches((4, 8)), steps=4)

    out = model(torch.randn(2, 8))
    assert out.dtype == torch.float32  # the loss outside the model runs in fp32
    row = harness.results()["amp-bf16"]
    assert row["applied"] and row["verified"], row
    assert "bfloat16" in row["detail"]


def test_autocast_model_still_pickles_and_deepcopies(harness_factory):
    harness = harness_factory("amp-bf16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    harness.train(model, opt, batches((4, 8)), steps=2)

    buffer = io.BytesIO()
    torch.save(model, buffer)  # whole-module pickling, as some scripts checkpoint
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded(torch.randn(2, 8)).dtype == torch.float32
    assert "forward" in vars(copy.deepcopy(model))


def test_user_autocast_is_respected(harness_factory):
    harness = harness_factory("amp-bf16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_under_user_autocast(out, y):
        return torch.nn.functional.mse_loss(out.float(), y)

    data = iter(batches((4, 8)))
    for index in range(4):
        harness.runtime.publish_step_start(index, "timed")
        x, y = next(data)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        assert out.dtype == torch.float16  # the script's own dtype, not bf16 and not fp32
        loss_under_user_autocast(out, y).backward()
        opt.step()
        if index == 0:
            harness.runtime.publish_roots([model], [opt])

    row = harness.results()["amp-bf16"]
    assert row["applied"] is False
    assert "already" in row["detail"]


def learnable(count: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    xs = [torch.randn(16, 8, generator=generator) for _ in range(count)]
    return [(x, 0.5 * x.sum(dim=1, keepdim=True)) for x in xs]


def test_fp16_grad_scaler_with_clipping_tracks_the_fp32_trajectory(harness_factory):
    data = learnable()

    def clip(model):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(
        model, torch.optim.SGD(model.parameters(), lr=0.1), data, steps=30, before_step=clip
    )

    harness = harness_factory("amp-fp16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = harness.train(model, opt, data, steps=30, before_step=clip)

    row = harness.results()["amp-fp16"]
    assert row["applied"] and row["verified"], row
    assert "GradScaler stepped" in row["detail"]
    assert "unscale-before-clip" in row["detail"]
    # Without unscale-before-clip the clipped, scaled gradients would cripple training.
    assert base_losses[-1] < 0.5 * base_losses[0]  # the baseline does learn
    assert abs(losses[-1] - base_losses[-1]) / base_losses[-1] < 1e-2


def test_fp16_skipped_step_still_counts_as_a_step(harness_factory):
    harness = harness_factory("amp-fp16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen_steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: seen_steps.append(1))
    try:
        data = batches((4, 8))
        harness.train(model, opt, data, steps=2)
        # Plant an overflow: inf grads make the scaler skip this step.
        harness.runtime.publish_step_start(2, "timed")
        opt.zero_grad()
        loss = model(data[2][0]).sum() * torch.tensor(float("inf"))
        loss.backward()
        weight_before = model.fc1.weight.detach().clone()
        opt.step()
        assert torch.equal(model.fc1.weight, weight_before)  # skipped ...
        assert len(seen_steps) == 3  # ... but counted
    finally:
        handle.remove()
    row = harness.results()["amp-fp16"]
    assert "1 skipped" in row["detail"]


def test_fp16_leaves_a_script_grad_scaler_alone(harness_factory):
    harness = harness_factory("amp-fp16")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.amp.GradScaler("cpu", enabled=False)  # the script built its own
    harness.train(model, opt, batches((4, 8)), steps=3)
    assert "step" not in vars(opt)  # no per-instance scaled step was installed
    row = harness.results()["amp-fp16"]
    assert "own GradScaler" in row["detail"]


def test_planted_fp16_overflow_yields_non_finite_loss(harness_factory):
    """Activations beyond fp16's range: the loss the guard sees is inf/NaN."""

    class Overflow(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x * 1e5)

    harness = harness_factory("amp-fp16")
    model = seeded(Overflow)
    opt = torch.optim.SGD(model.parameters(), lr=1e-12)
    losses = harness.train(model, opt, batches((4, 8)), steps=3)
    assert math.isfinite(losses[0])  # iteration 1 runs unmodified in fp32
    assert not all(math.isfinite(v) for v in losses[1:])


def test_tf32_refused_without_cuda(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: False)
    row = harness_factory("tf32").results()["tf32"]
    assert row["applied"] is False and "CUDA" in row["detail"]


def test_tf32_sets_and_verifies_high_precision(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    previous = torch.get_float32_matmul_precision()
    try:
        harness = harness_factory("tf32")
        model = seeded(Mlp)
        harness.train(model, torch.optim.SGD(model.parameters(), lr=0.01), batches((4, 8)), steps=3)
        row = harness.results()["tf32"]
        assert row["applied"] and row["verified"], row
    finally:
        torch.set_float32_matmul_precision(previous)


def test_tf32_respects_an_explicit_script_choice(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    previous = torch.get_float32_matmul_precision()
    try:
        harness = harness_factory("tf32")
        torch.set_float32_matmul_precision("highest")  # the script's own setup
        model = seeded(Mlp)
        harness.train(model, torch.optim.SGD(model.parameters(), lr=0.01), batches((4, 8)), steps=3)
        row = harness.results()["tf32"]
        assert row["applied"] is False and "highest" in row["detail"]
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision(previous)
