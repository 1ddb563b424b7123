"""Everything under tests/gpu needs a live CUDA device: marked `gpu`, skipped without one.

Run them on a CUDA machine with `python -m pytest tests/gpu -q` (or `-m gpu`). Most tests
drive perfdoctor through its command line in child processes; test_gpu_switches.py drives
the appliers in this process (as tests/integration/test_appliers_cuda.py does), so only the
worker that runs it creates a CUDA context. Collection only asks whether CUDA is there.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected test of the session, so it only touches our own.
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if not cuda_available():
            item.add_marker(skip)
