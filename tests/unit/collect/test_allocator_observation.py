"""The child's view of the allocator for issue 22 part 2: device malloc/free counts from
memory_stats and the caching allocator turned off in the environment."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from perfdoctor.collect import observe


def _torch(stats: dict[str, Any]) -> Any:
    return SimpleNamespace(cuda=SimpleNamespace(memory_stats=lambda index: stats))


def test_device_calls_and_caching_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    monkeypatch.delenv("PYTORCH_NO_HIP_MEMORY_CACHING", raising=False)
    got = observe.allocator_calls(_torch({"num_device_alloc": 1360, "num_device_free": 1350}), 0)
    assert got == {"device_allocs": 1360, "device_frees": 1350, "caching_disabled": True}


def test_hip_flag_and_missing_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING", raising=False)
    monkeypatch.setenv("PYTORCH_NO_HIP_MEMORY_CACHING", "1")
    got = observe.allocator_calls(_torch({}), 0)
    assert got == {"device_allocs": None, "device_frees": None, "caching_disabled": True}


def test_caching_on_unless_the_value_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # c10 turns caching off only for "1" (pytorch#90431).
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "0")
    monkeypatch.delenv("PYTORCH_NO_HIP_MEMORY_CACHING", raising=False)
    assert observe.allocator_calls(_torch({}), 0)["caching_disabled"] is False
