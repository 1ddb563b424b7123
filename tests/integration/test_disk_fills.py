"""A disk that fills during the run (issue 31): perfdoctor ends in 73 with its one line, and
no traceback of its own (the child's `observations.json not written`, the stderr tee) comes
first. Needs a small tmpfs, so root and mount(8); skipped elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRAIN = """
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def test_a_disk_that_fills_mid_run_is_73_in_one_line(tmp_path: Path, small_disk: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", "--steps", "20000",
         "--out", str(small_disk), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 73, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "perfdoctor: error: cannot write" in proc.stderr
    assert "No space left on device" in proc.stderr
