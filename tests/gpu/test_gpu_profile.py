"""`perfdoctor profile` on a live CUDA GPU: memory snapshot, NVML samples, kernel facts, NVTX,
and the snapshot left behind by an out-of-memory crash.

The scripts are written to a temporary directory and profiled through the command line, so
the launcher, the bootstrap, the samplers and the offline analysis all take part.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfdoctor import rundir
from perfdoctor.analyze.memory import load_memory

PLAN = ["--steps", "60", "--warmup", "5", "--profile-steps", "3"]

# Large enough matmuls that every sampling tick (100 ms) sees kernels running.
TRAIN_CUDA = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048)
).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(10_000):
    x = torch.randn(1024, 2048, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""

# Hoards 256 MiB per step under a cap of about 1 GiB: out of memory during the warm-up
# steps, while the allocator history is recording.
OOM_CUDA = """\
import torch

total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(min(0.5, (1 << 30) / total))
model = torch.nn.Linear(1024, 1024).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
hoard = []
for step in range(10_000):
    x = torch.randn(256, 1024, device="cuda")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    hoard.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
"""


# Three long fp32 matmuls per step and no host sync: the host enqueues a step in well under a
# millisecond while the GPU needs several, so for the whole run the host is far ahead.
HOST_AHEAD_CUDA = """\
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
weight = torch.nn.Parameter(torch.randn(4096, 4096, device="cuda") / 64)
optimizer = torch.optim.SGD([weight], lr=1e-6)
x = torch.randn(4096, 4096, device="cuda")
for step in range(10_000):
    loss = (x @ weight).square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""


# A running loss read with .item() every step: the host waits for the GPU at line 11.
SYNC_EVERY_STEP_CUDA = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)
).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(10_000):
    loss = model(torch.randn(512, 1024, device="cuda")).pow(2).mean()
    loss.backward()
    running = loss.item()
    optimizer.step()
    optimizer.zero_grad()
"""
SYNC_LINE = 11


class Profiled:
    def __init__(self, proc: subprocess.CompletedProcess[str], cwd: Path) -> None:
        self.proc = proc
        self.session = (cwd / "perfdoctor-runs" / "latest").resolve()
        self.baseline = self.session / rundir.BASELINE_LABEL
        self.report: dict[str, Any] = json.loads((self.session / rundir.REPORT_JSON).read_text())

    def observations(self) -> dict[str, Any]:
        return rundir.read_json(self.baseline / rundir.OBSERVATIONS_FILE)


def profile_script(cwd: Path, source: str, *options: str) -> Profiled:
    (cwd / "train.py").write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", *options, "train.py"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return Profiled(proc, cwd)


@pytest.fixture(scope="module")
def cuda_run(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    profiled = profile_script(tmp_path_factory.mktemp("cuda"), TRAIN_CUDA, *PLAN)
    assert profiled.proc.returncode == 0, profiled.proc.stderr[-3000:]
    return profiled


def test_the_run_is_a_cuda_run(cuda_run: Profiled) -> None:
    assert cuda_run.report["status"] == "completed"
    assert cuda_run.report["device"]["kind"] == "cuda"
    assert cuda_run.report["baseline"]["steps_timed"] == 60


def test_step_time_is_read_on_the_gpus_clock(cuda_run: Profiled) -> None:
    steps = list(rundir.load_steps(cuda_run.baseline))
    timed = [s for s in steps if s.phase == "timed"]
    assert timed and all(s.device_ms is not None and s.device_ms > 0 for s in timed)
    assert cuda_run.observations()["device_step_timing"] == {"used": True, "failed": None}


def test_device_clock_sees_the_work_the_host_only_enqueued(tmp_path: Path) -> None:
    profiled = profile_script(
        tmp_path, HOST_AHEAD_CUDA, "--steps", "20", "--warmup", "3", "--profile-steps", "0"
    )
    assert profiled.proc.returncode == 0, profiled.proc.stderr[-3000:]
    timed = [s for s in rundir.load_steps(profiled.baseline) if s.phase == "timed"]
    host = sorted(s.wall_ms for s in timed)[len(timed) // 2]
    device = sorted(s.device_ms for s in timed if s.device_ms is not None)[len(timed) // 2]
    # ~3 x 137 GFLOP of fp32 per step: milliseconds on any GPU, while the host only launches.
    assert device > 3 * host, (host, device)
    assert profiled.report["baseline"]["step_ms_p50"] >= 0.9 * device


def test_host_sync_is_found_at_its_exact_line(tmp_path: Path) -> None:
    profiled = profile_script(
        tmp_path, SYNC_EVERY_STEP_CUDA, "--steps", "10", "--warmup", "3", "--profile-steps", "3"
    )
    assert profiled.proc.returncode == 0, profiled.proc.stderr[-3000:]
    calls = profiled.observations()["host_sync_calls"]
    assert calls["steps_watched"] == 3
    top = calls["sites"][0]
    assert (top["line"], top["call"], top["count"]) == (SYNC_LINE, ".item()", 1)
    assert profiled.report["facts"]["host_syncs_per_step"] >= 1
    finding = next(f for f in profiled.report["findings"] if f["rule_id"] == "host-syncs")
    assert finding["locations"][0]["line"] == SYNC_LINE


def test_memory_snapshot_is_written_and_loads_offline(cuda_run: Profiled) -> None:
    snapshot = cuda_run.baseline / rundir.MEMORY_SNAPSHOT_FILE
    assert snapshot.is_file()
    summary = load_memory(snapshot)
    assert summary.peak_allocated_bytes > 0
    assert summary.peak_reserved_bytes >= summary.peak_allocated_bytes
    assert summary.history_entries > 0


def test_nvml_samples_have_power_and_utilization(cuda_run: Profiled) -> None:
    rows = list(rundir.read_jsonl(cuda_run.baseline / rundir.SAMPLES_FILE))
    gpu = [r for r in rows if r.get("kind") == "gpu"]
    assert gpu, [r for r in rows if r.get("kind") == "note"]
    assert max(r.get("power_w", 0) for r in gpu) > 0
    assert any("util_gpu" in r for r in gpu)
    assert max(r.get("util_gpu", 0) for r in gpu) > 0


def test_kernel_facts_are_measured(cuda_run: Profiled) -> None:
    facts = cuda_run.report["facts"]
    assert facts["gpu_busy_frac"] is not None
    assert 0 < facts["gpu_busy_frac"] <= 1
    assert facts["kernels_per_step"] is not None
    assert facts["kernels_per_step"] > 0
    assert facts["peak_allocated_bytes"] is not None


def test_nvtx_ranges_do_not_break_a_run(tmp_path: Path) -> None:
    profiled = profile_script(
        tmp_path, TRAIN_CUDA, "--nvtx", "--steps", "5", "--warmup", "2", "--profile-steps", "0"
    )
    assert profiled.proc.returncode == 0, profiled.proc.stderr[-3000:]
    assert profiled.report["status"] == "completed"
    nvtx = profiled.observations()["nvtx"]
    assert nvtx["requested"] is True
    assert nvtx["available"] is True, nvtx


def test_out_of_memory_leaves_a_snapshot(tmp_path: Path) -> None:
    profiled = profile_script(
        tmp_path, OOM_CUDA, "--steps", "5", "--warmup", "20", "--profile-steps", "0"
    )
    assert profiled.proc.returncode == 1, profiled.proc.stderr[-3000:]
    assert "OutOfMemoryError" in profiled.proc.stderr
    assert profiled.report["status"] == "script_crashed"
    snapshot = profiled.baseline / rundir.MEMORY_SNAPSHOT_FILE
    assert snapshot.is_file()
    assert load_memory(snapshot).peak_allocated_bytes > 0
    history = profiled.observations()["memory_history"]
    assert history["snapshot_reason"] == "oom"
