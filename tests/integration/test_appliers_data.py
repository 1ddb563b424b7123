"""Input-pipeline appliers in-process on CPU: DataLoader workers, pin_memory, non_blocking."""

from __future__ import annotations

import pytest
import torch
from appliers_support import Harness
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from perfdoctor.collect.appliers import base, data
from perfdoctor.collect.appliers.data import start_method, worker_refusal
from perfdoctor.optimize.sizing import (
    WORKERS_ENV,
    WORKERS_FEWER_ENV,
    WORKERS_WHY_ENV,
    default_workers,
)


@pytest.fixture(autouse=True)
def threads_restored():
    """Tests here set torch's intra-op threads (and cpu-threads holds them): give the next
    test the count it started with."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def dataset(n: int = 32) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(n, 8, generator=generator), torch.randn(n, 1, generator=generator)
    )


def drive(harness: Harness, loader: DataLoader, steps: int = 3) -> list[torch.Tensor]:
    """Iterate like a training loop, publishing steps as the probes would."""
    seen = []
    for index, (x, _y) in enumerate(loader):
        if index >= steps:
            break
        harness.runtime.publish_step_start(index, "timed")
        seen.append(x)
    return seen


def test_workers_raised_and_verified_with_the_same_batches(harness_factory):
    plain = [x for x, _ in DataLoader(dataset(), batch_size=8)]
    threads = torch.get_num_threads()
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(dataset(), batch_size=8)
    cores = base.usable_cores()
    assert loader.num_workers == default_workers(cores)
    assert torch.get_num_threads() == threads  # one change: the workers, not the threads
    assert loader.persistent_workers is False  # never turned on by default
    seen = drive(harness, loader)
    for got, want in zip(seen, plain, strict=False):
        assert torch.equal(got, want)  # same order: the sampler runs in the main process
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and row["verified"], row
    assert "num_workers 0 ->" in row["detail"]
    assert "test_appliers_data.py" in row["detail"]  # the script line that built it


def test_workers_set_by_the_script_are_kept(harness_factory):
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(dataset(), batch_size=8, num_workers=1)
    assert loader.num_workers == 1
    row = harness.results()["dataloader-workers"]
    assert row["applied"] is False and "kept num_workers=1" in row["detail"]


def test_default_count_says_why(harness_factory, monkeypatch):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    harness = harness_factory("dataloader-workers")
    cores = base.usable_cores()
    assert DataLoader(dataset(), batch_size=8).num_workers == default_workers(cores)
    row = harness.results()["dataloader-workers"]
    why = f"(no measured sizing: min(4, {cores} cores - 1) workers)"
    assert why in row["detail"]


def test_workers_sized_by_the_parent_are_used_and_the_threads_left(harness_factory, monkeypatch):
    # What pipeline._Runner passes for a dataloader-workers run: the worker count and why.
    monkeypatch.setenv(WORKERS_ENV, "2")
    why = "data 43 ms/batch vs 6.0 ms compute on 2 threads; 2 workers on 2 cores"
    monkeypatch.setenv(WORKERS_WHY_ENV, why)
    torch.set_num_threads(2)  # the script's intra-op threads: not this variant's to change
    plain = [x for x, _ in DataLoader(dataset(), batch_size=8)]
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(dataset(), batch_size=8)
    assert loader.num_workers == 2
    assert torch.get_num_threads() == 2
    seen = drive(harness, loader)
    for got, want in zip(seen, plain, strict=False):
        assert torch.equal(got, want)
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and row["verified"], row
    assert f": num_workers 0 -> 2, intra-op threads left at 2 ({why})" in row["detail"]
    assert "(2 workers); torch.get_num_threads() reads 2" in row["detail"]  # what verify saw


def test_threads_the_script_sets_after_its_dataloader_are_left(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "1")
    harness = harness_factory("dataloader-workers")
    DataLoader(dataset(), batch_size=8)
    torch.set_num_threads(3)  # the script, after building its DataLoader
    model = torch.nn.Linear(8, 1)
    harness.runtime.publish_roots([model], [torch.optim.SGD(model.parameters(), lr=0.1)])
    assert torch.get_num_threads() == 3
    applier = harness.applied.appliers[0]
    assert not any("threads" in n for n in applier.notes)


def test_script_workers_win_over_the_sized_count(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "6")
    harness = harness_factory("dataloader-workers")
    assert DataLoader(dataset(), batch_size=8, num_workers=1).num_workers == 1
    row = harness.results()["dataloader-workers"]
    assert row["applied"] is False and "kept num_workers=1" in row["detail"]


def test_fewer_workers_lower_the_scripts_count_to_zero(harness_factory, monkeypatch):
    """sizing.fewer_workers: the script's 4 workers on 2 cores become in-process loading,
    verified on the iterator; a loader built with none (an evaluation's) is left alone."""
    monkeypatch.setenv(WORKERS_ENV, "0")
    monkeypatch.setenv(WORKERS_FEWER_ENV, "1")
    monkeypatch.setenv(WORKERS_WHY_ENV, "4 workers on 2 cores: the wait is the hand-off")
    plain = [x for x, _ in DataLoader(dataset(), batch_size=8)]
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(dataset(), batch_size=8, num_workers=4)
    evaluation = DataLoader(dataset(), batch_size=8)
    assert loader.num_workers == 0 and evaluation.num_workers == 0
    seen = drive(harness, loader)
    for got, want in zip(seen, plain, strict=False):
        assert torch.equal(got, want)
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and row["verified"], row
    assert "num_workers 4 -> 0 (the script's, lowered)" in row["detail"]
    assert "1/1 iterated loaders run 0 workers" in row["detail"]


def test_fewer_workers_never_raise(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "1")
    monkeypatch.setenv(WORKERS_FEWER_ENV, "1")
    harness = harness_factory("dataloader-workers")
    assert DataLoader(dataset(), batch_size=8).num_workers == 0
    assert DataLoader(dataset(), batch_size=8, num_workers=1).num_workers == 1
    assert DataLoader(dataset(), batch_size=8, num_workers=3).num_workers == 1
    row = harness.results()["dataloader-workers"]
    assert row["applied"] and "num_workers 3 -> 1" in row["detail"]


def test_zero_workers_need_the_fewer_flag(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "0")
    harness = harness_factory("dataloader-workers")
    assert DataLoader(dataset(), batch_size=8).num_workers == default_workers(base.usable_cores())
    applier = harness.applied.appliers[0]
    assert any("not a positive integer" in n for n in applier.notes)


def test_sized_count_still_refused_for_an_iterable_dataset(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "6")
    harness = harness_factory("dataloader-workers")
    assert DataLoader(Stream(), batch_size=2).num_workers == 0
    row = harness.results()["dataloader-workers"]
    assert row["applied"] is False and "IterableDataset" in row["detail"]


def test_bad_sized_count_falls_back_to_the_default(harness_factory, monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "lots")
    harness = harness_factory("dataloader-workers")
    assert DataLoader(dataset(), batch_size=8).num_workers == default_workers(base.usable_cores())
    applier = harness.applied.appliers[0]
    assert any("ignored PERFDOCTOR_DATALOADER_WORKERS='lots'" in n for n in applier.notes)


class Stream(IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([float(i)]) for i in range(6))


def test_iterable_dataset_refused(harness_factory):
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(Stream(), batch_size=2)
    assert loader.num_workers == 0
    assert [b.flatten().tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    row = harness.results()["dataloader-workers"]
    assert row["applied"] is False and "IterableDataset" in row["detail"]


class LambdaDataset(Dataset):
    def __init__(self) -> None:
        self.transform = lambda v: v * 2  # fine under fork, unpicklable under spawn

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(torch.tensor([float(i)]))


def test_unpicklable_dataset_refused_under_spawn(harness_factory, monkeypatch):
    # As after multiprocessing.set_start_method("spawn") in the script (or Python 3.14's
    # forkserver default), without changing this test process's own start method.
    monkeypatch.setattr(data.multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    harness = harness_factory("dataloader-workers")
    loader = DataLoader(LambdaDataset(), batch_size=2)
    assert loader.num_workers == 0
    assert [b.flatten().tolist() for b in loader] == [[0.0, 2.0], [4.0, 6.0]]
    row = harness.results()["dataloader-workers"]
    assert row["applied"] is False
    assert "cannot be pickled for spawn workers" in row["detail"]


def test_unpicklable_dataset_accepted_under_fork():
    assert worker_refusal({"dataset": LambdaDataset(), "multiprocessing_context": "fork"}) is None


def test_start_method_does_not_fix_the_global_default():
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    assert start_method(None) in ("fork", "forkserver", "spawn")
    assert multiprocessing.get_start_method(allow_none=True) == before
    assert start_method(multiprocessing.get_context("spawn")) == "spawn"


def test_subclassed_dataloader_is_covered(harness_factory):
    class MyLoader(DataLoader):
        def __init__(self, ds):
            super().__init__(ds, batch_size=4)

    harness = harness_factory("dataloader-workers")
    assert MyLoader(dataset()).num_workers > 0
    harness.close()
    assert MyLoader(dataset()).num_workers == 0  # uninstall restores DataLoader


def test_pin_memory_and_non_blocking_refused_without_cuda(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: False)
    rows = harness_factory("pin-memory", "non-blocking-copies").results()
    assert rows["pin-memory"]["applied"] is False and "CUDA" in rows["pin-memory"]["detail"]
    row = rows["non-blocking-copies"]
    assert row["applied"] is False and "CUDA" in row["detail"]


def test_pin_memory_keeps_an_explicit_choice(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    harness = harness_factory("pin-memory")
    assert DataLoader(dataset(), batch_size=8, pin_memory=False).pin_memory is False
    row = harness.results()["pin-memory"]
    assert row["applied"] is False and "kept pin_memory=False" in row["detail"]


def test_non_blocking_leaves_cpu_to_cpu_copies_alone(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    harness = harness_factory("non-blocking-copies")
    x = torch.randn(4)
    assert torch.equal(x.to("cpu"), x)
    assert x.to(torch.float64).dtype == torch.float64
    row = harness.results()["non-blocking-copies"]
    assert row["applied"] is True and row["verified"] is False
    assert "needs pin-memory" in row["detail"]


def test_stacked_with_cpu_threads_each_changes_its_own(harness_factory, monkeypatch):
    # Stacked, the workers come from dataloader-workers and the threads from cpu-threads,
    # which counts the same budget at the first step: usable cores less the workers.
    cores = base.usable_cores()
    monkeypatch.setenv(WORKERS_ENV, "1")
    harness = harness_factory("cpu-threads", "dataloader-workers")
    loader = DataLoader(dataset(), batch_size=8)
    harness.runtime.dataloaders.append(loader)  # what the probes record in a child
    assert loader.num_workers == 1
    model = torch.nn.Linear(8, 1)
    harness.runtime.publish_roots([model], [torch.optim.SGD(model.parameters(), lr=0.1)])
    assert torch.get_num_threads() == max(1, cores - 1)
    rows = harness.results()
    assert "the script asked" not in rows["cpu-threads"]["detail"]  # perfdoctor's own call
    assert rows["dataloader-workers"]["applied"], rows
    assert "num_workers 0 -> 1, intra-op threads left at" in rows["dataloader-workers"]["detail"]
    if cores > 1:  # on one core the target is the count at start-up: nothing to change
        assert "minus 1 DataLoader workers" in rows["cpu-threads"]["detail"]
