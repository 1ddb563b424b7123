"""The dataloader-workers applier follows the DataLoader that is actually iterated, when a
framework (Hugging Face Accelerate, and the Trainer through it) rebuilds the script's
loader from its arguments and iterates the copy."""

from __future__ import annotations

import pytest
import torch
from appliers_support import Harness
from torch.utils.data import DataLoader, TensorDataset

from perfdoctor.optimize.sizing import WORKERS_ENV

pytestmark = pytest.mark.integration


@pytest.fixture
def harness(monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "2")
    made = Harness(("dataloader-workers",)).install()
    yield made
    made.close()


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1))


def drive(harness: Harness, loader, steps: int = 3) -> int:
    seen = 0
    for index, _batch in enumerate(loader):
        if index >= steps:
            break
        harness.runtime.publish_step_start(index, "timed")
        seen += 1
    return seen


def test_a_copy_of_the_changed_loader_is_followed(harness: Harness) -> None:
    script_loader = DataLoader(dataset(), batch_size=8)  # what the script built
    assert script_loader.num_workers == 2
    # What Accelerate's prepare() does: a new loader over the same dataset, arguments copied.
    rebuilt = DataLoader(script_loader.dataset, batch_size=8, num_workers=script_loader.num_workers)
    assert drive(harness, rebuilt) == 3
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and row["verified"], row
    assert "set by the script" not in row["detail"]
    assert "rebuilt from a changed one keeps its num_workers=2" in row["detail"]
    assert "1/1 iterated loaders multi-process (2 workers)" in row["detail"]


def test_a_loader_the_script_gave_its_own_workers_is_still_its_own(harness: Harness) -> None:
    DataLoader(dataset(), batch_size=8)  # changed, never iterated
    own = DataLoader(dataset(), batch_size=8, num_workers=1)  # another dataset object
    drive(harness, own)
    row = harness.results()["dataloader-workers"]
    assert row["verified"] is False
    assert "never iterated" in row["detail"]


def test_accelerate_prepare_iterates_a_rebuilt_loader_with_the_workers(harness: Harness) -> None:
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    script_loader = DataLoader(dataset(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, script_loader)
    assert loader is not script_loader
    assert drive(harness, loader) == 3
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and row["verified"], row
    assert "1/1 iterated loaders multi-process (2 workers)" in row["detail"]
