"""The cpu-threads applier sizes the intra-op threads in both directions: the usable cores
less the cores other processes kept busy in the baseline (the reserve the parent passes),
held against the script's own set_num_threads calls, and the script's count back when
switched off."""

from __future__ import annotations

from typing import Any

import pytest

from perfdoctor.optimize.sizing import THREADS_RESERVE_ENV

from .fake_runtime import FakeRuntime

torch = pytest.importorskip("torch")


def two_usable_cores(monkeypatch: Any) -> None:
    """The applier sees 2 usable cores, whatever this machine has."""
    from perfdoctor.collect.appliers import base

    monkeypatch.setattr(base, "usable_cores", lambda: 2)
    monkeypatch.setattr("perfdoctor.collect.appliers.cpu.usable_cores", lambda: 2)


class RootsNow(FakeRuntime):
    """Runs the first-step hook at once (the script's loaders are known by then)."""

    def on_roots_known(self, fn: Any) -> None:
        fn([], [])


def test_a_reserve_lowers_the_threads_and_off_gives_the_script_its_count(monkeypatch) -> None:
    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu import CpuThreads

    two_usable_cores(monkeypatch)
    monkeypatch.setenv(THREADS_RESERVE_ENV, "1")
    before = torch.get_num_threads()
    patcher = Patcher()
    applier = CpuThreads()
    try:
        torch.set_num_threads(2)
        applier.install(ApplyContext(RootsNow(), patcher))
        assert torch.get_num_threads() == 1  # 2 usable cores less 1 kept busy by others
        torch.set_num_threads(2)  # the script asks again: held
        assert torch.get_num_threads() == 1
        applier.switch(False)
        assert torch.get_num_threads() == 2  # the script's own count
        applier.switch(True)
        assert torch.get_num_threads() == 1
        assert "1 cores other processes kept busy" in applier.result()["detail"]
    finally:
        patcher.restore()
        torch.set_num_threads(before)


class FakeTwin:
    """dataloader-workers' side of a coupled arm: its twin loader's workers, on or off."""

    def __init__(self, workers: int) -> None:
        self.workers, self.twins, self.applied, self.active = workers, True, True, False

    def feeding_workers(self) -> int | None:
        return self.workers if self.active else None


def test_in_a_coupled_arm_the_threads_count_the_twin_loaders_workers(monkeypatch) -> None:
    """2 cores, the script's 2 threads and no workers: cpu-threads alone has nothing to
    change, but beside the twin loader's 2 workers it holds 1 thread (the coupled arm), and
    gives the count back when the twin is switched off."""
    from perfdoctor.collect.appliers.base import TWIN_WORKERS_KEY, ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu import CpuThreads
    from perfdoctor.optimize.fix_patch import COUPLED_THREADS_PATTERN

    two_usable_cores(monkeypatch)
    monkeypatch.delenv(THREADS_RESERVE_ENV, raising=False)
    before = torch.get_num_threads()
    patcher = Patcher()
    ctx = ApplyContext(RootsNow(), patcher)
    twin = FakeTwin(workers=2)
    ctx.shared[TWIN_WORKERS_KEY] = twin.feeding_workers
    applier = CpuThreads()
    try:
        torch.set_num_threads(2)
        applier.install(ctx)
        assert applier.applied is not False  # the coupled arm has a change to make
        applier.switch(True)
        assert torch.get_num_threads() == 2  # alone: the usable cores, as the script runs
        twin.active = True
        applier.retarget()  # what dataloader-workers' switch calls
        assert torch.get_num_threads() == 1  # beside the twin's 2 workers
        assert applier.verify(final=False)[0]
        applier.switch(False)
        assert torch.get_num_threads() == 2  # off: the script's own count
        twin.active = False
        applier.switch(True)
        assert torch.get_num_threads() == 2
        import re

        detail = applier.result()["detail"]
        assert re.findall(COUPLED_THREADS_PATTERN, detail) == ["1"], detail
    finally:
        patcher.restore()
        torch.set_num_threads(before)


def test_without_a_twin_and_with_nothing_to_change_the_applier_refuses(monkeypatch) -> None:
    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu import CpuThreads

    two_usable_cores(monkeypatch)
    monkeypatch.delenv(THREADS_RESERVE_ENV, raising=False)
    before = torch.get_num_threads()
    patcher = Patcher()
    applier = CpuThreads()
    try:
        torch.set_num_threads(2)
        applier.install(ApplyContext(RootsNow(), patcher))
        assert applier.applied is False and "nothing to change" in applier.detail
    finally:
        patcher.restore()
        torch.set_num_threads(before)
