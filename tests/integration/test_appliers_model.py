"""Model-transform appliers in-process on CPU: channels_last, compile, checkpointing."""

from __future__ import annotations

import functools
import io

import pytest
import torch
from appliers_support import ConvNet, Harness, Mlp, Tower, batches, seeded

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.transforms import repeated_blocks


def test_channels_last_converts_weights_and_inputs_with_identical_loss(harness_factory):
    data = batches((2, 3, 8, 8))
    baseline = Harness(())
    model = seeded(ConvNet)
    base_losses = baseline.train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, steps=5)

    harness = harness_factory("channels-last")
    model = seeded(ConvNet)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    param_ids = [id(p) for p in model.parameters()]
    losses = harness.train(model, opt, data, steps=5)

    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert [id(p) for p in model.parameters()] == param_ids  # the optimizer stays valid
    row = harness.results()["channels-last"]
    assert row["applied"] and row["verified"], row
    assert "inputs converted" in row["detail"]
    for got, want in zip(losses, base_losses, strict=True):
        assert got == pytest.approx(want, rel=1e-4)


def test_channels_last_refused_without_convolutions(harness_factory):
    harness = harness_factory("channels-last")
    model = seeded(Mlp)
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["channels-last"]
    assert row["applied"] is False and "4-D" in row["detail"]


def test_model_transforms_without_roots_say_why(harness_factory):
    row = harness_factory("channels-last").results()["channels-last"]
    assert row["applied"] is False and "root model was never identified" in row["detail"]


@pytest.fixture
def eager_compile(monkeypatch):
    """Inductor needs ~12 s per fresh process on a 2-core machine: the eager backend
    exercises the same dynamo path (frames, graphs) in milliseconds."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))


def test_compile_in_place_verified_by_dynamo_counters(harness_factory, eager_compile):
    harness = harness_factory("compile")
    model = seeded(Mlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    keys = set(model.state_dict())
    harness.train(model, opt, batches((4, 8)), steps=4)

    assert model._compiled_call_impl is not None
    assert set(model.state_dict()) == keys  # no _orig_mod. prefix
    row = harness.results()["compile"]
    assert row["applied"] and row["verified"], row
    assert "frames compiled" in row["detail"]


def test_compile_skipped_when_the_script_compiled(harness_factory, eager_compile):
    harness = harness_factory("compile")
    model = seeded(Mlp)
    model.compile()  # the script's own choice
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=2)
    row = harness.results()["compile"]
    assert row["applied"] is False and "already compiles" in row["detail"]


def test_cudagraphs_refused_on_cpu(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: False)
    row = harness_factory("compile-cudagraphs").results()["compile-cudagraphs"]
    assert row["applied"] is False and "CUDA" in row["detail"]


def test_checkpointing_wraps_repeated_blocks_with_identical_gradients(harness_factory):
    data = batches((4, 8))
    baseline = Harness(())
    model = seeded(Tower)
    base_losses = baseline.train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, steps=4)
    base_weights = [p.detach().clone() for p in model.parameters()]

    harness = harness_factory("activation-checkpointing")
    model = seeded(Tower)
    losses = harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, steps=4)

    row = harness.results()["activation-checkpointing"]
    assert row["applied"] and row["verified"], row
    assert "3 x Block" in row["detail"]
    assert losses == pytest.approx(base_losses, rel=1e-6)
    for got, want in zip(model.parameters(), base_weights, strict=True):
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    buffer = io.BytesIO()
    torch.save(model, buffer)  # the checkpoint wrapper does not leak into saved models


def test_checkpointing_refused_with_batchnorm_inside(harness_factory):
    harness = harness_factory("activation-checkpointing")
    model = seeded(lambda: Tower(norm=True))
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["activation-checkpointing"]
    assert row["applied"] is False
    assert "BatchNorm" in row["detail"] and "twice" in row["detail"]


def test_repeated_blocks_ignores_leaf_layers_and_nests_no_checkpoints():
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    assert repeated_blocks(mlp) == ([], [])
    found, refused = repeated_blocks(Tower(depth=2), "Tower")
    assert [(where, len(blocks)) for where, blocks in found] == [("Tower.blocks (2 x Block)", 2)]
    assert refused == []


def test_stacked_autocast_checkpoint_compile_compile_once(harness_factory, eager_compile):
    """The wrappers' own bookkeeping must stay invisible to Dynamo: a counter read inside
    the traced forward would be guarded on and recompile the model every step."""
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    harness = harness_factory("amp-bf16", "activation-checkpointing", "compile")
    model = seeded(Tower)
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=6)
    rows = harness.results()
    assert all(r["applied"] and r["verified"] for r in rows.values()), rows
    assert "traced into the compiled model" in rows["amp-bf16"]["detail"]
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
