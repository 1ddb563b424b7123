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


class RootsNow(FakeRuntime):
    """Runs the first-step hook at once (the script's loaders are known by then)."""

    def on_roots_known(self, fn: Any) -> None:
        fn([], [])


def test_a_reserve_lowers_the_threads_and_off_gives_the_script_its_count(monkeypatch) -> None:
    from perfdoctor.collect.appliers import base
    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu import CpuThreads

    monkeypatch.setattr(base, "usable_cores", lambda: 2)
    monkeypatch.setattr("perfdoctor.collect.appliers.cpu.usable_cores", lambda: 2)
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
