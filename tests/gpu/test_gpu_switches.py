"""Switchable appliers on a live CUDA device, in this process: the fixes switched on and
off between training steps (as the in-process A/B controller does), the CUDA-side state read
back in both positions. Counterparts of tests/integration/test_appliers_switch.py (CPU).
No timing is asserted.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

# The in-process applier harness lives with the integration tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from appliers_support import ConvNet, Harness, Mlp, batches, seeded

from perfdoctor.collect.appliers.precision import INIT_SCALE

ON, OFF = True, False
# 20 steps in blocks; step 0 runs before the roots are known, step 2 (the appliers' check)
# is an on-step.
PLAN = [ON, ON, ON, OFF, OFF, OFF, ON, ON, ON, OFF, OFF, OFF, ON, ON, ON, OFF, OFF, ON, ON, ON]


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(*ids: str) -> Harness:
        harness = Harness(ids).install()
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


def cuda_data(shape: tuple[int, ...], count: int = len(PLAN)) -> list[tuple[torch.Tensor, ...]]:
    return [(x.cuda(), y.cuda()) for x, y in batches(shape, count=count)]


class Probed(Mlp):
    """Records the dtype of fc1's output, inside the forward, at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []
        self.fc1.register_forward_hook(lambda m, i, out: self.dtypes.append(out.dtype))


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01)


@pytest.fixture
def counted_steps() -> Iterator[list[int]]:
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: steps.append(1))
    yield steps
    handle.remove()


def test_bf16_autocast_switches_on_cuda(harness_factory):
    if not torch.cuda.is_bf16_supported():
        pytest.skip("GPU without native bf16")
    harness = harness_factory("amp-bf16")
    model = seeded(Probed).cuda()
    losses = harness.train(model, sgd(model), cuda_data((4, 8)), steps=len(PLAN), positions=PLAN)
    expected = [torch.float32] + [torch.bfloat16 if on else torch.float32 for on in PLAN[1:]]
    assert model.dtypes == expected
    assert all(math.isfinite(v) for v in losses)
    row = harness.results()["amp-bf16"]
    assert row["applied"] and row["verified"], row


def test_fp16_with_grad_scaler_switches_on_cuda(harness_factory, counted_steps):
    harness = harness_factory("amp-fp16")
    amp = harness.applier("amp-fp16")
    model = seeded(Probed).cuda()
    scales: list[float] = []

    def clip(m: torch.nn.Module) -> None:
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)

    def record_scale(m: torch.nn.Module) -> None:
        clip(m)
        scales.append(amp.scaler.get_scale() if amp.scaler is not None else INIT_SCALE)

    losses = harness.train(
        model,
        sgd(model),
        cuda_data((4, 8)),
        steps=len(PLAN),
        positions=PLAN,
        before_step=record_scale,
    )
    assert all(math.isfinite(v) for v in losses)
    assert len(counted_steps) == len(PLAN)  # every step counted once, skipped or not
    assert amp.scaled_steps == amp.scaled_backwards == sum(PLAN[1:])
    assert model.dtypes[1:] == [torch.float16 if on else torch.float32 for on in PLAN[1:]]
    assert all(math.isfinite(s) and 1.0 <= s <= INIT_SCALE for s in scales)
    for index in range(2, len(PLAN)):
        if not PLAN[index] and not PLAN[index - 1]:
            assert scales[index] == scales[index - 1]  # off-steps leave the scale alone
    harness.switch(ON)
    row = harness.results()["amp-fp16"]
    assert row["applied"] and row["verified"], row
    assert "unscale-before-clip" in row["detail"]


def test_fused_adamw_switches_its_step_tensors_on_cuda(harness_factory):
    data = cuda_data((4, 8))
    baseline = Harness(())
    model = seeded(Mlp).cuda()
    base_losses = baseline.train(
        model, torch.optim.AdamW(model.parameters(), lr=1e-2), data, steps=len(PLAN)
    )

    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    forms: list[tuple[object, ...]] = []

    def record(m: torch.nn.Module) -> None:
        step = opt.state[m.fc1.weight].get("step")
        form = (step.device.type, step.dtype) if step is not None else None
        forms.append((opt.param_groups[0]["fused"], form))

    losses = harness.train(model, opt, data, steps=len(PLAN), positions=PLAN, before_step=record)
    assert forms[0] == (True, None)  # no state before the first step
    assert forms[1:] == [
        (True, ("cuda", torch.float32)) if on else (None, ("cpu", torch.float32)) for on in PLAN[1:]
    ]
    assert losses == pytest.approx(base_losses, rel=1e-4)
    row = harness.results()["fused-optimizer"]
    assert row["applied"] and row["verified"], row


def test_fused_optimizer_and_grad_scaler_switch_together_on_cuda(harness_factory):
    harness = harness_factory("amp-fp16", "fused-optimizer")
    model = seeded(Mlp).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = harness.train(model, opt, cuda_data((4, 8)), steps=len(PLAN), positions=PLAN)
    assert all(math.isfinite(v) for v in losses)
    assert harness.applier("amp-fp16").scaled_steps == sum(PLAN[1:])
    rows = harness.results()
    assert all(r["applied"] and r["verified"] for r in rows.values()), rows


def test_tf32_and_cudnn_flags_read_back_in_both_positions(harness_factory):
    cudnn = torch.backends.cudnn
    before = (
        torch.get_float32_matmul_precision(),
        cudnn.benchmark,
        cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
    )
    try:
        torch.set_float32_matmul_precision("highest")
        cudnn.benchmark = False
        harness = harness_factory("tf32", "cudnn-benchmark", "cudnn-nondeterministic")
        cudnn.deterministic = True  # the script's own setup
        model = seeded(ConvNet).cuda()
        seen: list[tuple[object, ...]] = []

        def read(m: torch.nn.Module) -> None:
            seen.append(
                (
                    torch.get_float32_matmul_precision(),
                    torch.backends.cuda.matmul.allow_tf32,
                    cudnn.benchmark,
                    cudnn.deterministic,
                )
            )

        harness.train(
            model,
            sgd(model),
            cuda_data((2, 3, 16, 16)),
            steps=len(PLAN),
            positions=PLAN,
            before_step=read,
        )
        fix, script = ("high", True, True, False), ("highest", False, False, True)
        assert seen == [fix if on else script for on in PLAN]
        harness.switch(ON)
        rows = harness.results()
        assert all(r["applied"] and r["verified"] for r in rows.values()), rows
    finally:
        torch.set_float32_matmul_precision(before[0])
        cudnn.benchmark, cudnn.deterministic = before[1], before[2]
        torch.use_deterministic_algorithms(before[3])


def test_compile_switches_without_recompiling_on_cuda(harness_factory, monkeypatch):
    """Inductor for real: after the first on-step compiled the model, switching to the
    eager forward and back reuses the compiled code (no new frame, no new graph)."""
    compile_ = torch.compile
    calls: list[int] = []

    def counting(fn, **options):
        compiled = compile_(fn, **options)

        def call(*args, **kwargs):
            calls.append(1)
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "compile", counting)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()

    data = cuda_data((4, 8))
    baseline = Harness(())
    model = seeded(Mlp).cuda()
    base_losses = baseline.train(model, sgd(model), data, steps=len(PLAN))

    harness = harness_factory("compile")
    model = seeded(Mlp).cuda()
    compiled_calls: list[int] = []
    settled: list[tuple[int, int]] = []

    def after(m: torch.nn.Module) -> None:
        compiled_calls.append(len(calls))
        if len(calls) == 1:
            settled.append((int(counters["frames"]["ok"]), int(counters["stats"]["unique_graphs"])))

    losses = harness.train(
        model, sgd(model), data, steps=len(PLAN), positions=PLAN, before_step=after
    )
    per_step = [b - a for a, b in zip([0, *compiled_calls], compiled_calls, strict=False)]
    assert per_step == [0] + [1 if on else 0 for on in PLAN[1:]]
    assert settled and settled[0][0] >= 1
    now = (int(counters["frames"]["ok"]), int(counters["stats"]["unique_graphs"]))
    assert now == settled[0]
    assert losses == pytest.approx(base_losses, rel=1e-3)
    row = harness.results()["compile"]
    assert row["applied"] and row["verified"], row
