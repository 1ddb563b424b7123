"""CUDA memory history (collect/memory_history.py) without a GPU: a stand-in for torch.cuda
that records the calls and serves a snapshot, plus the real CPU-only behaviour."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfdoctor import rundir
from perfdoctor.collect.memory_history import MemoryHistory
from perfdoctor.collect.nvtx import Nvtx


class FakeMemory:
    """torch.cuda.memory as of 2.13: the public function forwards **kwargs to the impl."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self.calls: list[dict[str, Any]] = []
        self.snapshot = snapshot

    def _record_memory_history(self, enabled: Any = "all", *args: Any, **kwargs: Any) -> None:
        self.calls.append({"enabled": enabled, **kwargs})

    def _record_memory_history_impl(
        self,
        enabled: Any = "all",
        context: Any = "all",
        stacks: str = "all",
        max_entries: int = sys.maxsize,
        device: Any = None,
        clear_history: bool = False,
    ) -> None:
        raise AssertionError("only inspected, never called")

    def _snapshot(self, device: Any = None) -> dict[str, Any]:
        return self.snapshot


class OldFakeMemory(FakeMemory):
    """torch ~2.1: explicit keywords on the public function, no clear_history, no impl."""

    _record_memory_history_impl = None  # type: ignore[assignment]

    def _record_memory_history(  # type: ignore[override]
        self,
        enabled: Any = "all",
        context: Any = "all",
        stacks: str = "all",
        max_entries: int = sys.maxsize,
        device: Any = None,
    ) -> None:
        self.calls.append(
            {"enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}
        )


def fake_torch(memory: FakeMemory, *, initialized: bool = True) -> Any:
    observers: list[Any] = []
    state = {"initialized": initialized}
    cuda = SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: state["initialized"],
        memory=memory,
    )
    c_module = SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)
    return SimpleNamespace(cuda=cuda, _C=c_module, observers=observers, state=state)


def snapshot(entries_per_device: list[int]) -> dict[str, Any]:
    return {
        "segments": [{"device": 0, "total_size": 2 << 20, "blocks": []}],
        "device_traces": [
            [{"action": "alloc", "size": 512, "addr": i} for i in range(n)]
            for n in entries_per_device
        ],
    }


def history(tmp_path: Path, torch: Any, max_entries: int = 100) -> MemoryHistory:
    recorder = MemoryHistory(tmp_path, requested=True, max_entries=max_entries)
    recorder.setup(torch)
    return recorder


def test_nothing_is_recorded_before_the_script_initialises_cuda(tmp_path: Path) -> None:
    memory = FakeMemory(snapshot([0]))
    torch = fake_torch(memory, initialized=False)
    recorder = history(tmp_path, torch)
    recorder.start(clear=False)
    assert memory.calls == []
    assert recorder.dump("profiled window") is False
    torch.state["initialized"] = True
    recorder.start(clear=False)
    assert len(memory.calls) == 1


def test_history_is_started_with_keywords_the_installed_torch_accepts(tmp_path: Path) -> None:
    memory = FakeMemory(snapshot([3]))
    recorder = history(tmp_path, fake_torch(memory), max_entries=1234)
    recorder.start(clear=True)
    recorder.stop()
    assert memory.calls == [
        {
            "enabled": "all",
            "context": "all",
            "stacks": "python",
            "max_entries": 1234,
            "clear_history": True,
        },
        {"enabled": None},
    ]

    old = OldFakeMemory(snapshot([3]))
    recorder = history(tmp_path, fake_torch(old), max_entries=1234)
    recorder.start(clear=True)  # this torch has no clear_history: not passed
    assert old.calls == [
        {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 1234}
    ]


@pytest.mark.parametrize(("entries", "truncated"), [([10, 99], False), ([10, 100], True)])
def test_snapshot_is_a_loadable_pickle_and_says_when_the_ring_buffer_filled(
    tmp_path: Path, entries: list[int], truncated: bool
) -> None:
    taken = snapshot(entries)
    recorder = history(tmp_path, fake_torch(FakeMemory(taken)), max_entries=100)
    recorder.start(clear=True)
    assert recorder.dump("profiled window") is True
    with (tmp_path / rundir.MEMORY_SNAPSHOT_FILE).open("rb") as fh:
        assert pickle.load(fh) == taken
    assert recorder.info["entries"] == sum(entries)
    assert recorder.info["truncated"] is truncated
    assert recorder.info["snapshot_reason"] == "profiled window"


def test_out_of_memory_dumps_the_snapshot_once(tmp_path: Path) -> None:
    memory = FakeMemory(snapshot([5]))
    torch = fake_torch(memory)
    recorder = history(tmp_path, torch)
    recorder.start(clear=False)
    assert len(torch.observers) == 1
    torch.observers[0](0, 1 << 30, 7 << 30, 1 << 20)  # what the allocator calls on OOM
    assert recorder.info["oom_events"] == 1
    assert recorder.info["oom"]["requested_bytes"] == 1 << 30
    assert recorder.info["snapshot_reason"] == "oom"
    (tmp_path / rundir.MEMORY_SNAPSHOT_FILE).unlink()
    recorder.dump_on_oom()  # the bootstrap's except path: already dumped by the observer
    assert not (tmp_path / rundir.MEMORY_SNAPSHOT_FILE).exists()
    assert memory.calls[-1] == {"enabled": None}


def test_without_cuda_history_and_nvtx_say_why_they_are_off(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this checks the CPU-only behaviour")
    recorder = MemoryHistory(tmp_path, requested=True, max_entries=10)
    recorder.setup()
    recorder.start(clear=True)
    assert recorder.info["available"] is False
    assert recorder.info["reason"] == "CUDA is not available"
    assert recorder.dump("profiled window") is False
    emitter, info = Nvtx.create(True)
    assert emitter is None
    assert info == {"requested": True, "available": False, "reason": "CUDA is not available"}
