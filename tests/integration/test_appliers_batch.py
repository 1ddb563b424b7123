"""The batch-size applier (collect/appliers/batch.py): the DataLoader rebuilt at the planned
batch, the peaks written to batch_probe.json, and gradient accumulation equal to the large
batch it stands for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from appliers_support import Harness
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from perfdoctor.optimize.batch_knob import ACCUMULATE_ENV, BATCH_ENV, BATCH_FROM_ENV

pytestmark = pytest.mark.integration


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the harness's run directory is "."
    return tmp_path


def _dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1))


def test_the_training_loader_is_rebuilt_and_the_peaks_written(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BATCH_ENV, "32")
    monkeypatch.setenv(BATCH_FROM_ENV, "8")
    harness = Harness(("batch-size",)).install()
    try:
        train = DataLoader(_dataset(), batch_size=8, shuffle=True)
        evaluation = DataLoader(_dataset(), batch_size=100)
        sampled = DataLoader(
            _dataset(), batch_sampler=BatchSampler(SequentialSampler(range(64)), 8, False)
        )
        assert (train.batch_size, evaluation.batch_size, sampled.batch_size) == (32, 100, None)
        for index, (x, _) in enumerate(train):
            harness.runtime.publish_step_start(index, "timed")
            assert x.shape[0] == 32
        row = harness.results()["batch-size"]
    finally:
        harness.close()
    assert row["applied"] and row["verified"], row
    assert "batch_size 8 -> 32" in row["detail"]
    probe = json.loads((in_tmp / "batch_probe.json").read_text())
    assert probe["batch_size"] == 32 and probe["knob"] == "dataloader"
    assert probe["rss_train_peak_bytes"] > 0 and probe["rss_setup_peak_bytes"] > 0


def _trained(batches: list[torch.Tensor], targets: list[torch.Tensor]) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in zip(batches, targets, strict=True):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model.weight.detach().clone()


def test_accumulation_over_two_micro_batches_equals_the_batch_of_both(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y = _dataset().tensors
    whole = _trained([x[:16], x[16:32]], [y[:16], y[16:32]])
    monkeypatch.setenv(ACCUMULATE_ENV, "2")
    harness = Harness(("batch-size",)).install()
    try:
        micro = _trained([x[:8], x[8:16], x[16:24], x[24:32]], [y[:8], y[8:16], y[16:24], y[24:32]])
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        harness.runtime.publish_step_start(0, "timed")
        opt.zero_grad()
        model(x[:8]).sum().backward()
        opt.step()
        model.zero_grad()  # a module's zero_grad inside the accumulation keeps the gradient
        assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0
        row = harness.results()["batch-size"]
    finally:
        harness.close()
    assert torch.allclose(whole, micro, atol=1e-6)
    assert row["applied"] and row["verified"], row
    assert json.loads((in_tmp / "batch_probe.json").read_text())["accumulate"] == 2
