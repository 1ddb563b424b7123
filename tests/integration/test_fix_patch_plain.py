"""fixes.patch does what was measured: the patch of an accepted anomaly-off is applied to a copy
of a script, and the patched copy, run plainly (no perfdoctor), is faster by the script's own
clock than the original, alternated in one test run. Anomaly mode makes each step of this
MLP about 2x slower; the assertion is only on the direction, summed over alternated pairs,
never an absolute time."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from forked_scripts import run_forked

from perfdoctor.model import AppliedOptimization, Facts, VariantResult
from perfdoctor.optimize.fix_patch import PATCH_NAME, build_fix_patch

SCRIPT = '''"""A short training loop with anomaly detection left on; prints its own clock."""
import statistics
import time

import torch
from torch import nn

torch.manual_seed(0)
torch.autograd.set_detect_anomaly(True)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(64, 64), nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
times = []
for step in range(40):
    start = time.perf_counter()
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step >= 5:
        times.append(time.perf_counter() - start)
print(f"ms/step {statistics.median(times) * 1000:.4f}")
'''
PAIRS = 2


def _accepted_anomaly_off() -> VariantResult:
    return VariantResult(
        label="anomaly-off",
        optimizations=("anomaly-off",),
        step_ms_p50=1.0,
        step_ms_p90=None,
        speedup=2.0,
        speedup_noise=None,
        peak_memory_bytes=None,
        loss_delta=0.0,
        verdict="accepted",
        reason="faster",
        applied=(AppliedOptimization("anomaly-off", True, True, "anomaly mode off"),),
        method="in-process",
        interval=(1.8, 2.2),
    )


def _own_clock(output: str) -> float:
    found = re.search(r"ms/step ([0-9.]+)", output)
    assert found, output
    return float(found.group(1))


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")
def test_the_patched_copy_is_faster_by_its_own_clock(tmp_path: Path) -> None:
    original = tmp_path / "original"
    patched = tmp_path / "patched"
    for folder in (original, patched):
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
    patch = build_fix_patch([_accepted_anomaly_off()], Facts(values={}), "train.py", patched)
    (patched / PATCH_NAME).write_text(patch.text())
    subprocess.run(["patch", "-p1", "-i", PATCH_NAME], cwd=patched, check=True, capture_output=True)
    assert "set_detect_anomaly(False)" in (patched / "train.py").read_text()

    # Both copies run plainly, as `python train.py` in their own folder, each in a fork of
    # one process that imported torch once (forked_scripts.py): 4 runs, 1 torch import.
    # One intra-op thread, in both copies alike: with torch's default of one per core, the
    # idle threads spin at every op's barrier (about 12 s of CPU a run on the loaded 2-core
    # machine against 7 s), and each small op can cost a scheduler slice, so the step times
    # swung tenfold between runs of the same copy. Anomaly mode's cost is per op, in Python:
    # one thread keeps all of it.
    jobs = []
    for i in range(PAIRS):  # alternated: A B, B A, so a drift of the machine cancels
        order = (original, patched) if i % 2 == 0 else (patched, original)
        jobs += [(folder / "train.py", [], folder / f"run-{i}.log") for folder in order]
    ran = run_forked(jobs, env={"OMP_NUM_THREADS": "1"}, timeout_s=300)
    before, after = [], []
    for (script, _, _), (code, output) in zip(jobs, ran, strict=True):
        assert code == 0, output
        (before if script.parent == original else after).append(_own_clock(output))
    assert sum(after) < sum(before), (before, after)
