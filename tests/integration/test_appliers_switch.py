"""Switchable appliers in-process on CPU: real training steps with the fix switched on and
off between steps (as the in-process A/B controller does), the observable state read back
in both positions, the script's own later settings honoured while off.

CUDA-only flags are exercised through base.cuda_available, as in test_appliers_flags.py.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from appliers_support import Harness, Mlp, batches, seeded
from torch.optim.optimizer import register_optimizer_step_post_hook

from perfdoctor.collect.appliers import APPLIERS, base

ON, OFF = True, False
# Step 0 runs before the roots are known (model transforms start at step 1); the applier's
# check at the start of step 2 (base.VERIFY_STEP) is asked while on, as the controller does.
PLAN = [ON, ON, ON, OFF, ON, OFF, OFF, ON]


def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05)


def learnable(count: int = 40) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(3)
    xs = [torch.randn(16, 8, generator=generator) for _ in range(count)]
    return [(x, 0.5 * x.sum(dim=1, keepdim=True)) for x in xs]


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)


# --------------------------------------------------------------------------- tf32


@pytest.fixture
def keep_matmul_precision():
    before = torch.get_float32_matmul_precision()
    yield
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "ieee"  # undo a new-API setting
    torch.set_float32_matmul_precision(before)


def test_tf32_switches_and_follows_the_scripts_later_settings(
    harness_factory, fake_cuda, keep_matmul_precision
):
    torch.set_float32_matmul_precision("highest")
    harness = harness_factory("tf32")
    applier = harness.applier("tf32")
    model = seeded(Mlp)
    seen: list[str] = []
    harness.train(
        model,
        sgd(model),
        batches((4, 8)),
        steps=len(PLAN),
        positions=PLAN,
        before_step=lambda m: seen.append(torch.get_float32_matmul_precision()),
    )
    assert seen == ["high" if on else "highest" for on in PLAN]

    # The script sets TF32 itself while the fix is on: its wish, though nothing changes now.
    torch.backends.cuda.matmul.allow_tf32 = True
    applier.switch(OFF)
    assert torch.get_float32_matmul_precision() == "high"
    torch.set_float32_matmul_precision("medium")  # while off: the script's call goes through
    assert torch.get_float32_matmul_precision() == "medium"
    applier.switch(ON)
    assert torch.get_float32_matmul_precision() == "high"
    applier.switch(OFF)
    assert torch.get_float32_matmul_precision() == "medium"
    applier.switch(ON)
    row = harness.results()["tf32"]
    assert row["applied"] and row["verified"], row


def test_tf32_switched_off_before_the_first_step(harness_factory, fake_cuda, keep_matmul_precision):
    torch.set_float32_matmul_precision("highest")
    harness = harness_factory("tf32")
    harness.switch(OFF)
    assert torch.get_float32_matmul_precision() == "highest"
    model = seeded(Mlp)
    harness.train(model, sgd(model), batches((4, 8)), steps=3)  # roots known while off
    assert torch.get_float32_matmul_precision() == "highest"
    harness.switch(ON)
    assert torch.get_float32_matmul_precision() == "high"


def test_tf32_refused_for_the_scripts_choice_switches_nothing(
    harness_factory, fake_cuda, keep_matmul_precision
):
    harness = harness_factory("tf32")
    torch.backends.cuda.matmul.allow_tf32 = False  # the script's own setup
    model = seeded(Mlp)
    harness.train(model, sgd(model), batches((4, 8)), steps=3, positions=[ON, OFF, ON])
    assert torch.get_float32_matmul_precision() == "highest"
    row = harness.results()["tf32"]
    assert row["applied"] is False and "allow_tf32 = False" in row["detail"]


@pytest.mark.skipif(
    not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="no fp32_precision API"
)
def test_tf32_gives_up_when_the_script_uses_the_new_api(
    harness_factory, fake_cuda, keep_matmul_precision
):
    harness = harness_factory("tf32")
    model = seeded(Mlp)
    harness.train(model, sgd(model), batches((4, 8)), steps=3)
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # mid-run, the new API
    harness.switch(OFF)
    harness.switch(ON)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # left to the script
    row = harness.results()["tf32"]
    assert row["applied"] is False and "fp32_precision = 'tf32'" in row["detail"]


# --------------------------------------------------------------------------- cuDNN flags


@pytest.fixture
def keep_determinism():
    before = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    yield
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[:2]
    torch.use_deterministic_algorithms(before[2], warn_only=before[3])


def determinism() -> tuple[bool, bool, bool]:
    return (
        torch.backends.cudnn.deterministic,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def test_cudnn_flags_switch_and_follow_the_scripts_later_settings(
    harness_factory, fake_cuda, keep_determinism
):
    torch.backends.cudnn.benchmark = False
    harness = harness_factory("cudnn-benchmark", "cudnn-nondeterministic")
    # The script's setup, while the fix is on: it asks for reproducibility.
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = seeded(Mlp)
    seen: list[tuple[bool, tuple[bool, bool, bool]]] = []
    harness.train(
        model,
        sgd(model),
        batches((4, 8)),
        steps=len(PLAN),
        positions=PLAN,
        before_step=lambda m: seen.append((torch.backends.cudnn.benchmark, determinism())),
    )
    script = (False, (True, True, True))
    fix = (True, (False, False, False))
    assert seen == [fix if on else script for on in PLAN]

    harness.switch(OFF)
    # The script changes its mind while off: its calls go through.
    torch.backends.cudnn.benchmark = True
    torch.use_deterministic_algorithms(False)
    harness.switch(ON)
    harness.switch(OFF)
    assert (torch.backends.cudnn.benchmark, determinism()) == (True, (True, False, False))
    # ... and while on: remembered although the flag already reads the fix's value.
    harness.switch(ON)
    torch.backends.cudnn.deterministic = False
    harness.switch(OFF)
    assert determinism() == (False, False, False)
    harness.switch(ON)
    rows = harness.results()
    assert all(r["applied"] and r["verified"] for r in rows.values()), rows


def test_cudnn_flags_changed_through_torch_internals_are_seen_at_the_switch(
    harness_factory, fake_cuda, keep_determinism
):
    torch.backends.cudnn.benchmark = True
    harness = harness_factory("cudnn-benchmark")
    harness.switch(OFF)
    assert torch.backends.cudnn.benchmark is True  # the script's own, from before
    # cudnn.flags() sets the C flag directly, past the patched attribute.
    torch.backends.cudnn.set_flags(torch.backends.cudnn.enabled, False)
    harness.switch(ON)
    assert torch.backends.cudnn.benchmark is True
    harness.switch(OFF)
    assert torch.backends.cudnn.benchmark is False


# --------------------------------------------------------------------------- autocast


class Probed(Mlp):
    """Records the dtype of fc1's output, inside the forward, at every call."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []
        self.fc1.register_forward_hook(lambda m, i, out: self.dtypes.append(out.dtype))


def test_bf16_autocast_switches_between_steps(harness_factory):
    harness = harness_factory("amp-bf16")
    model = seeded(Probed)
    outputs: list[torch.dtype] = []
    original_forward = Probed.forward

    def loss_fn(out, y):
        outputs.append(out.dtype)
        return torch.nn.functional.mse_loss(out, y)

    losses = harness.train(
        model, sgd(model), learnable(), steps=len(PLAN), positions=PLAN, loss_fn=loss_fn
    )
    expected = [torch.float32] + [torch.bfloat16 if on else torch.float32 for on in PLAN[1:]]
    assert model.dtypes == expected
    assert outputs == [torch.float32] * len(PLAN)  # the loss always runs in fp32
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]

    harness.switch(OFF)
    # Off, the script's own autocast is its own, and so is the forward.
    with torch.autocast("cpu", dtype=torch.float16):
        assert model(torch.randn(2, 8)).dtype == torch.float16
    assert model.forward.original.__func__ is original_forward
    harness.switch(ON)
    row = harness.results()["amp-bf16"]
    assert row["applied"] and row["verified"], row


def test_autocast_switched_off_before_the_roots_are_known(harness_factory):
    harness = harness_factory("amp-bf16")
    harness.switch(OFF)
    model = seeded(Probed)
    harness.train(model, sgd(model), batches((4, 8)), steps=3)
    assert model.dtypes == [torch.float32] * 3
    harness.switch(ON)
    harness.train(model, sgd(model), batches((4, 8), seed=1), steps=2)
    assert model.dtypes[3:] == [torch.bfloat16] * 2


def fp16_steps(harness, model, opt, data, plan, *, clip=True):
    """Training steps with the switch at each boundary; for every step, what the scaler and
    the gradients looked like: (on, loss scale after, grads equal to fp32 grads)."""
    seen = []
    amp = harness.applier("amp-fp16")
    for index, (on, (x, y)) in enumerate(zip(plan, data, strict=False)):
        harness.switch(on)
        harness.runtime.publish_step_start(index, "timed")
        reference = copy.deepcopy(model)  # the class forward: fp32, no autocast
        for module in reference.modules():
            module._forward_hooks.clear()
        params = list(reference.parameters())
        # autograd.grad: a backward call would be the applier's to scale
        grads = torch.autograd.grad(torch.nn.functional.mse_loss(reference(x), y), params)
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 10.0)
        fp32_grads = all(
            torch.allclose(p.grad, r.grad, rtol=1e-5, atol=1e-7)
            for p, r in zip(model.parameters(), reference.parameters(), strict=True)
        )
        opt.step()
        if index == 0:
            harness.runtime.publish_roots([model], [opt])
        scale = amp.scaler.get_scale() if amp.scaler is not None else None
        seen.append((on, scale, fp32_grads, float(loss.detach())))
    return seen


def test_fp16_grad_scaler_stays_out_of_the_off_steps(harness_factory):
    harness = harness_factory("amp-fp16")
    amp = harness.applier("amp-fp16")
    model = seeded(Probed)
    opt = sgd(model)
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: steps.append(1))
    try:
        plan = [ON, ON, ON, OFF, OFF, ON, OFF, ON, ON, OFF, ON, ON]
        seen = fp16_steps(harness, model, opt, learnable(), plan)
    finally:
        handle.remove()
    assert len(steps) == len(plan)  # every step counted once, on or off
    on_steps = sum(plan[1:])  # step 0 ran before the roots were known
    assert amp.scaled_steps == amp.scaled_backwards == on_steps
    assert model.dtypes[1:] == [torch.float16 if on else torch.float32 for on in plan[1:]]
    for index, (on, scale, fp32_grads, loss) in enumerate(seen):
        assert math.isfinite(loss)
        assert fp32_grads is (index == 0 or not on), index  # on: fp16 autocast's grads
        if index and not on:
            # Off: the script's own fp32 step, unscaled grads, the scale left where it was.
            assert fp32_grads, index
            assert scale == seen[index - 1][1], index
    assert all(s[1] == amp.scaler.get_scale() for s in seen[1:])  # no overflow, no growth
    harness.switch(ON)
    row = harness.results()["amp-fp16"]
    assert row["applied"] and row["verified"], row
    assert "(0 skipped" in row["detail"]


def test_fp16_overflow_before_a_switch_backs_off_once_and_counts_once(harness_factory):
    harness = harness_factory("amp-fp16")
    amp = harness.applier("amp-fp16")
    model = seeded(Mlp)
    opt = sgd(model)
    data = learnable()
    fp16_steps(harness, model, opt, data, [ON, ON], clip=False)
    scale = amp.scaler.get_scale()
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: steps.append(1))
    try:
        # An on-step whose gradients overflow: the scaler skips it.
        harness.runtime.publish_step_start(2, "timed")
        opt.zero_grad()
        (model(data[2][0]).sum() * torch.tensor(float("inf"))).backward()
        weights = model.fc1.weight.detach().clone()
        opt.step()
        assert torch.equal(model.fc1.weight, weights)
        harness.switch(OFF)  # the pending update() runs now: the scale backs off
        assert amp.scaler.get_scale() == scale * 0.5
        fp16_steps(harness, model, opt, data[3:], [OFF, OFF], clip=False)
        assert not torch.equal(model.fc1.weight, weights)  # off-steps step for real
        assert amp.scaler.get_scale() == scale * 0.5
        fp16_steps(harness, model, opt, data[5:], [ON], clip=False)
    finally:
        handle.remove()
    assert len(steps) == 4
    assert amp.skipped_steps == 1
    assert amp.scaled_steps == 3  # step 1, the skipped one, the last one
    assert amp.scaler.get_scale() == scale * 0.5


def test_fp16_switching_tracks_the_fp32_trajectory(harness_factory):
    data = learnable()
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(model, sgd(model), data, steps=30)

    harness = harness_factory("amp-fp16")
    model = seeded(Mlp)
    plan = [(index // 3) % 2 == 0 for index in range(30)]
    losses = harness.train(model, sgd(model), data, steps=30, positions=plan)
    assert base_losses[-1] < 0.5 * base_losses[0]
    assert abs(losses[-1] - base_losses[-1]) / base_losses[-1] < 1e-2


# --------------------------------------------------------------------------- compile


@pytest.fixture
def counted_compile(monkeypatch):
    """torch.compile with the eager backend (see test_appliers_model.py), its compiled
    callables counting their calls: which forward ran."""
    compile_ = torch.compile
    calls: list[int] = []

    def counting(fn, **options):
        compiled = compile_(fn, backend="eager", **options)

        def call(*args, **kwargs):
            calls.append(1)
            return compiled(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "compile", counting)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    return calls


def compiles() -> tuple[int, int]:
    counters = torch._dynamo.utils.counters
    return int(counters["frames"]["ok"]), int(counters["stats"]["unique_graphs"])


def test_compile_switches_between_compiled_and_eager_without_recompiling(
    harness_factory, counted_compile
):
    data = learnable()
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(model, sgd(model), data, steps=len(PLAN))

    harness = harness_factory("compile")
    model = seeded(Mlp)
    opt = sgd(model)
    ran: list[int] = []
    compiled_after_first: list[tuple[int, int]] = []

    def after(m):
        ran.append(len(counted_compile))
        if len(counted_compile) == 1 and not compiled_after_first:
            compiled_after_first.append(compiles())

    losses = harness.train(model, opt, data, steps=len(PLAN), positions=PLAN, before_step=after)
    compiled_steps = [b - a for a, b in zip([0, *ran], ran, strict=False)]
    assert compiled_steps == [0] + [1 if on else 0 for on in PLAN[1:]]
    assert compiled_after_first[0][0] >= 1
    assert compiles() == compiled_after_first[0]  # switching back reuses the compiled code
    assert losses == pytest.approx(base_losses, rel=1e-5)  # the same parameters throughout
    row = harness.results()["compile"]
    assert row["applied"] and row["verified"], row


def test_compile_switched_off_before_the_roots_are_known(harness_factory, counted_compile):
    harness = harness_factory("compile")
    harness.switch(OFF)
    model = seeded(Mlp)
    harness.train(model, sgd(model), batches((4, 8)), steps=3)
    assert counted_compile == [] and compiles() == (0, 0)
    assert model._compiled_call_impl is None
    harness.switch(ON)
    harness.train(model, sgd(model), batches((4, 8), seed=1), steps=2)
    assert len(counted_compile) == 2 and compiles()[0] >= 1


def test_appliers_that_do_not_switch_say_so():
    for opt_id in ("compile-cudagraphs", "debug-modes-off"):
        cls = APPLIERS[opt_id]
        assert cls.switchable is False
        with pytest.raises(base.NotSwitchable, match="cannot be switched"):
            cls().switch(True)


# --------------------------------------------------------------------------- fused optimizer


def implementation(opt: torch.optim.Optimizer) -> tuple[object, ...]:
    return (
        tuple(group["fused"] for group in opt.param_groups),
        opt.defaults["fused"],
        getattr(opt, "_step_supports_amp_scaling", False),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda params: torch.optim.AdamW(params, lr=1e-2),
        lambda params: torch.optim.Adam(params, lr=1e-2, amsgrad=True),
        lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        lambda params: torch.optim.Adagrad(params, lr=0.05),
    ],
    ids=["AdamW", "Adam-amsgrad", "SGD-momentum", "Adagrad"],
)
def test_fused_optimizer_switches_per_group_with_an_identical_trajectory(harness_factory, make):
    data = learnable()
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(model, make(model.parameters()), data, steps=len(PLAN))

    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    groups = [{"params": model.fc1.parameters()}, {"params": model.fc2.parameters()}]
    opt = make(groups)
    seen: list[tuple[object, ...]] = []
    losses = harness.train(
        model,
        opt,
        data,
        steps=len(PLAN),
        positions=PLAN,
        before_step=lambda m: seen.append(implementation(opt)),
    )
    fused, script = ((True, True), True, True), ((None, None), None, False)
    assert seen == [fused if on else script for on in PLAN]
    assert losses == pytest.approx(base_losses, rel=1e-5)
    harness.switch(OFF)
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))]})
    assert opt.param_groups[-1]["fused"] is None  # a group the script adds while off
    harness.switch(ON)
    assert all(group["fused"] is True for group in opt.param_groups)
    row = harness.results()["fused-optimizer"]
    assert row["applied"] and row["verified"], row


@pytest.fixture
def float64_default():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def test_fused_switch_moves_adam_steps_to_the_form_each_implementation_makes(
    harness_factory, float64_default
):
    """Under a float64 default dtype the non-fused Adam keeps state['step'] in float64, the
    fused one in float32 (on the parameter's device, which on CUDA is the difference)."""
    data = [(x.double(), y.double()) for x, y in learnable()]
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(
        model, torch.optim.Adam(model.parameters(), lr=1e-2), data, steps=len(PLAN)
    )
    assert model.fc1.weight.dtype == torch.float64

    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    steps: list[tuple[torch.dtype, float]] = []

    def record(m):
        step = opt.state[m.fc1.weight].get("step")
        steps.append((step.dtype, float(step)) if step is not None else None)

    losses = harness.train(model, opt, data, steps=len(PLAN), positions=PLAN, before_step=record)
    # Read before each optimizer step: the form the switch left for this step's implementation.
    assert steps[0] is None
    assert (
        steps[1:]
        == [
            (torch.float32 if on else torch.float64, float(index)) for index, on in enumerate(PLAN)
        ][1:]
    )
    assert losses == pytest.approx(base_losses, rel=1e-6)


def test_fused_optimizer_under_a_grad_scaler_switches_with_it(harness_factory):
    """fused hands the loss scale to the optimizer (_step_supports_amp_scaling); off, the
    GradScaler must unscale first again, or the non-fused step would reject the scale."""
    harness = harness_factory("amp-fp16", "fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    plan = [ON, ON, ON, OFF, OFF, ON, ON, OFF, OFF, ON, ON, ON]
    seen = fp16_steps(harness, model, opt, learnable(), plan, clip=False)
    assert all(math.isfinite(loss) for *_, loss in seen)
    assert harness.applier("amp-fp16").scaled_steps == sum(plan[1:])
    harness.switch(ON)
    rows = harness.results()
    assert all(r["applied"] and r["verified"] for r in rows.values()), rows


def test_fused_keeps_a_param_groups_own_choice(harness_factory):
    harness = harness_factory("fused-optimizer")
    model = seeded(Mlp)
    opt = torch.optim.Adam(
        [{"params": model.fc1.parameters(), "foreach": False}, {"params": model.fc2.parameters()}]
    )
    harness.switch(ON)
    assert [group["fused"] for group in opt.param_groups] == [None, None]
    row = harness.results()["fused-optimizer"]
    assert row["applied"] is False and "param-group foreach=False" in row["detail"]


def test_fp16_scales_the_loss_of_a_compiled_model(harness_factory, counted_compile):
    """Compiled, the autocast wrapper runs only while traced (no call is counted): the loss
    must still be scaled, since the GradScaler's step unscales the gradients regardless."""
    data = learnable()
    baseline = Harness(())
    model = seeded(Mlp)
    base_losses = baseline.train(model, sgd(model), data, steps=20)

    harness = harness_factory("amp-fp16", "compile")
    model = seeded(Mlp)
    plan = [ON] * 3 + [(index // 3) % 2 == 0 for index in range(17)]
    losses = harness.train(model, sgd(model), data, steps=20, positions=plan)
    amp = harness.applier("amp-fp16")
    assert amp.scaled_backwards == amp.scaled_steps == sum(plan[1:])
    assert abs(losses[-1] - base_losses[-1]) / base_losses[-1] < 1e-2
