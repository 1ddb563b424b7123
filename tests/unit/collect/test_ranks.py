"""The pieces of a multi-rank run that need no child process: the torchrun command line,
rank directories, output filter, CPU sampling of the other ranks."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from load_limits import scaled

from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.output_capture import OutputTee
from perfdoctor.collect.torchrun import Nodes, root_command
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import RANKS_DIR, rank_dir, rank_dirs


def spec(tmp_path: Path, target: Target) -> RunSpec:
    return RunSpec(
        label="baseline",
        target=target,
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "baseline"),
        plan=StepPlan(warmup_steps=2, timed_steps=3, profiled_steps=2),
    )


def test_one_process_needs_no_torchrun(tmp_path: Path) -> None:
    assert root_command(spec(tmp_path, Target("script", "train.py")), "py", 1) is None


def test_nproc_per_node_runs_the_real_torchrun(tmp_path: Path) -> None:
    target = Target("script", "train.py", ("--lr", "0.1"))
    command = root_command(spec(tmp_path, target), "py", 2)
    assert command == [
        "py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "0", "train.py", "--lr", "0.1",
    ]  # fmt: skip
    module = root_command(spec(tmp_path, Target("module", "pkg.train")), "py", 4)
    assert module is not None and module[-2:] == ["-m", "pkg.train"]


def test_several_nodes_use_a_static_rendezvous_on_node_0(tmp_path: Path) -> None:
    nodes = Nodes(nnodes=2, node_rank=1, endpoint="10.0.0.5:29400")
    command = root_command(spec(tmp_path, Target("script", "t.py")), "py", 1, nodes)
    assert command is not None and "--standalone" not in command
    joined = " ".join(command)
    assert "--nnodes 2 --node-rank 1 --master-addr 10.0.0.5 --master-port 29400" in joined
    assert "--nproc-per-node 1" in joined


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
    tee = OutputTee(None, tmp_path / "stderr.log", echo)
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
        deadline = time.monotonic() + scaled(60)
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
