"""CUDA-only appliers in-process on a real GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch
from appliers_support import ConvNet, Mlp, batches, seeded
from torch.utils.data import DataLoader, TensorDataset

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def cuda_batches(shape: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.cuda(), y.cuda()) for x, y in batches(shape, count=20)]


def test_bf16_autocast_on_cuda(harness_factory):
    if not torch.cuda.is_bf16_supported():
        pytest.skip("GPU without native bf16")
    harness = harness_factory("amp-bf16")
    model = seeded(Mlp).cuda()
    harness.train(
        model, torch.optim.SGD(model.parameters(), lr=0.01), cuda_batches((4, 8)), steps=4
    )
    row = harness.results()["amp-bf16"]
    assert row["applied"] and row["verified"], row
    assert "bfloat16" in row["detail"]


def test_fp16_with_grad_scaler_on_cuda(harness_factory):
    harness = harness_factory("amp-fp16")
    model = seeded(Mlp).cuda()
    harness.train(
        model, torch.optim.SGD(model.parameters(), lr=0.01), cuda_batches((4, 8)), steps=5
    )
    row = harness.results()["amp-fp16"]
    assert row["applied"] and row["verified"], row
    assert "GradScaler stepped" in row["detail"]


def test_tf32_and_cudnn_flags_on_cuda(harness_factory):
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark)
    try:
        harness = harness_factory("tf32", "cudnn-benchmark", "channels-last")
        model = seeded(ConvNet).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        harness.train(model, opt, cuda_batches((2, 3, 16, 16)), steps=4)
        rows = harness.results()
        assert all(r["applied"] and r["verified"] for r in rows.values()), rows
    finally:
        torch.set_float32_matmul_precision(before[0])
        torch.backends.cudnn.benchmark = before[1]


def test_pinned_loader_and_non_blocking_copies(harness_factory):
    harness = harness_factory("pin-memory", "non-blocking-copies")
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8)
    assert loader.pin_memory is True
    for index, (x, _y) in enumerate(loader):
        harness.runtime.publish_step_start(index, "timed")
        assert x.is_pinned()
        x.to("cuda")
    rows = harness.results()
    assert rows["pin-memory"]["verified"] is True, rows
    assert rows["non-blocking-copies"]["verified"] is True, rows
