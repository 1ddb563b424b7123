"""The pieces of a multi-rank run that need no child process: environment, specs, output
filter, CPU sampling of the other ranks."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.launcher import _Tee
from perfdoctor.collect.ranks import RANK_ENV, free_port, rank_environment, rank_spec
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import RANKS_DIR, rank_dir, rank_dirs

# What torch 2.13's LocalElasticAgent._start_workers puts in a worker's environment
# (torch/distributed/elastic/agent/server/local_elastic_agent.py), LOCAL_RANK included.
TORCHRUN_WORKER_ENV = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}


def test_rank_environment_is_torchruns() -> None:
    env = rank_environment(1, 4, 29500, "run-1")
    assert set(env) == TORCHRUN_WORKER_ENV | {RANK_ENV}
    assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == env[RANK_ENV] == "1"
    assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
    assert env["GROUP_RANK"] == "0" and env["GROUP_WORLD_SIZE"] == "1"
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29500"
    assert env["TORCHELASTIC_RUN_ID"] == "run-1"
    # No agent store to share: rank 0 hosts the env:// rendezvous store itself.
    assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"


def test_free_port_is_a_port() -> None:
    assert 0 < free_port() < 65536


def test_rank_specs_share_the_plan_and_keep_their_own_directory(tmp_path: Path) -> None:
    spec = RunSpec(
        label="baseline",
        target=Target(kind="script", name="train.py"),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "baseline"),
        plan=StepPlan(warmup_steps=2, timed_steps=3, profiled_steps=2),
        optimizations=("cpu-threads",),
    )
    assert rank_spec(spec, 0) is spec
    other = rank_spec(spec, 2)
    assert other.run_dir == str(tmp_path / "baseline" / RANKS_DIR / "2")
    assert other.run_dir == str(rank_dir(Path(spec.run_dir), 2))
    assert other.plan == spec.plan and other.profile == spec.profile  # same steps, same end
    assert other.optimizations == spec.optimizations and other.seed == spec.seed
    assert other.record_memory_history is False


def test_rank_dirs_in_rank_order(tmp_path: Path) -> None:
    assert rank_dirs(tmp_path) == []
    for k in (10, 2, 1):
        rank_dir(tmp_path, k).mkdir(parents=True)
    (tmp_path / RANKS_DIR / "notes").mkdir()
    assert [k for k, _ in rank_dirs(tmp_path)] == [1, 2, 10]


def test_rank_prefixed_profiler_warnings_are_hidden_byte_by_byte(tmp_path: Path) -> None:
    noise = (
        b"[rank0]:[W1123 10:35:00.53 CPUAllocator.cpp:245] Memory block of unknown size was "
        b"allocated before the profiling started, profiler results will not include the "
        b"deallocation event\n"
    )
    kept = b"[rank0]:[W1123 10:35:01.00 user.cpp:1] a warning of the script's own\n"
    text = b"[rank] is a word the script printed\n" + noise + kept + b"done\n"
    echo = io.StringIO()
    tee = _Tee(None, tmp_path / "stderr.log", echo)
    for i in range(len(text)):  # the worst case: every byte its own chunk
        tee._filter(text[i : i + 1])
    tee._emit(tee._held, final=True)
    shown = echo.getvalue()
    assert "unknown size" not in shown
    assert "a warning of the script's own" in shown
    assert "[rank] is a word" in shown and shown.endswith("done\n")


def test_cpu_sampler_sums_the_other_ranks() -> None:
    peer = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"]
    )
    try:
        sampler = CpuSampler(os.getpid(), peers=[peer.pid])
        assert sampler.start() == []
        sampler.sample()
        # Behaviour, not timing: once the peer has used some CPU since the last reading
        # (however long a loaded machine takes to give it some), the next row counts it.
        watched = psutil.Process(peer.pid)
        used = sum(watched.cpu_times()[:2])
        deadline = time.monotonic() + 60
        while sum(watched.cpu_times()[:2]) - used < 0.05 and time.monotonic() < deadline:
            time.sleep(0.05)
        row = sampler.sample()[0]
        assert row["ranks"] == 1
        assert row["ranks_rss_bytes"] > 0
        assert row["ranks_cpu_percent"] > 0.0  # it spins
    finally:
        peer.kill()
        peer.wait()
    row = sampler.sample()[0]
    assert row["ranks"] == 0 and row["ranks_cpu_percent"] == 0.0
    sampler.stop()


def test_single_process_rows_are_unchanged() -> None:
    sampler = CpuSampler(os.getpid())
    sampler.start()
    assert not any(key.startswith("ranks") for key in sampler.sample()[0])
