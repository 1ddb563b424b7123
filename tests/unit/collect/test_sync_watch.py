"""The syncing calls are counted at the user's exact line while watched, and torch is left
exactly as it was afterwards. CUDA is faked by the device predicate: CPU tensors stand in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.sync_watch import TENSOR_METHODS, SyncCallWatcher

HERE = Path(__file__).resolve().parent


def user_code() -> UserCode:
    return UserCode([HERE], cwd=HERE, library_dirs=[])


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(marker))


def a_training_step(loss: torch.Tensor) -> float:
    if loss > 0:  # marker: bool
        pass
    return loss.item()  # marker: item


@pytest.fixture
def watcher():
    watcher = SyncCallWatcher(torch, user_code(), on_device=lambda t: True)
    yield watcher
    watcher.uninstall()


def test_counts_each_sync_at_its_exact_line(watcher: SyncCallWatcher) -> None:
    watcher.install()
    for _ in range(2):
        watcher.step_started()
        a_training_step(torch.tensor(3.0))
    watcher.uninstall()
    sites = {(s["line"], s["call"]): s for s in watcher.summary()["sites"]}
    item = sites[(line_of("# marker: item"), ".item()")]
    assert (item["calls"], item["count"], item["function"]) == (2, 1, "a_training_step")
    assert (line_of("# marker: bool"), "bool(tensor) (an `if` on a tensor)") in sites
    assert watcher.summary()["steps_watched"] == 2


def test_perfdoctors_own_reads_are_not_blamed_on_the_user(watcher: SyncCallWatcher) -> None:
    from perfdoctor.collect.step_log import _loss_values

    watcher.install()
    watcher.step_started()
    # The step log reads the captured losses back (.cpu().tolist()) from inside a user frame.
    assert _loss_values([(torch.tensor(1.5),)]) == [1.5]
    watcher.uninstall()
    assert watcher.summary()["calls"] == 0


def test_host_tensors_and_unwatched_steps_are_not_counted() -> None:
    watcher = SyncCallWatcher(torch, user_code(), on_device=lambda t: False)
    watcher.install()
    try:
        a_training_step(torch.tensor(1.0))
    finally:
        watcher.uninstall()
    a_training_step(torch.tensor(1.0))
    assert watcher.summary()["calls"] == 0


def test_calls_during_compile_tracing_pass_straight_through() -> None:
    watcher = SyncCallWatcher(
        torch, user_code(), on_device=lambda t: True, is_compiling=lambda: True
    )
    watcher.install()
    try:
        assert a_training_step(torch.tensor(2.0)) == 2.0
    finally:
        watcher.uninstall()
    assert watcher.summary()["calls"] == 0


def test_uninstall_leaves_torch_as_it_was(watcher: SyncCallWatcher) -> None:
    before = {name: torch.Tensor.__dict__.get(name) for name in TENSOR_METHODS}
    synchronize = torch.cuda.synchronize
    watcher.install()
    assert torch.Tensor.item is not before["item"]
    watcher.uninstall()
    assert {name: torch.Tensor.__dict__.get(name) for name in TENSOR_METHODS} == before
    assert torch.cuda.synchronize is synchronize
    assert torch.tensor(5.0).item() == 5.0 and bool(torch.tensor(1.0))


def test_synchronize_is_counted_at_its_caller(watcher: SyncCallWatcher) -> None:
    calls: list[int] = []
    fake_cuda = type(sys)("fake_cuda")
    fake_cuda.synchronize = lambda: calls.append(1)
    fake_torch = type(sys)("fake_torch")
    fake_torch.Tensor = torch.Tensor
    fake_torch.cuda = fake_cuda
    watcher = SyncCallWatcher(fake_torch, user_code(), on_device=lambda t: True)
    watcher.install()
    watcher.step_started()
    fake_cuda.synchronize()  # marker: synchronize
    watcher.uninstall()
    (site,) = watcher.summary()["sites"]
    assert (site["line"], site["call"]) == (
        line_of("# marker: synchronize"),
        "torch.cuda.synchronize()",
    )
    assert calls == [1]
