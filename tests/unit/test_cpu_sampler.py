"""CpuSampler against the real psutil and the current process (plus one child of it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from load_limits import scaled
from sleeping_child import sleeping_child

from perfdoctor.collect.cpu_sampler import TREE_LOOKUP_PERIOD_S, CpuSampler
from perfdoctor.collect.sampling import SamplingThread
from perfdoctor.rundir import read_jsonl


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_rows_have_per_core_util_and_this_process_rss() -> None:
    sampler = CpuSampler(os.getpid())
    assert sampler.start() == []
    _burn(0.05)
    [row] = sampler.sample()
    assert row["kind"] == "cpu"
    assert len(row["cpu_percent"]) == psutil.cpu_count(logical=True)
    assert all(0.0 <= p <= 100.0 for p in row["cpu_percent"])
    assert row["rss_bytes"] == pytest.approx(psutil.Process().memory_info().rss, rel=0.5)
    assert row["child_cpu_percent"] > 0.0  # this process just burned CPU
    sampler.stop()


def test_descendants_are_counted_as_workers() -> None:
    with sleeping_child() as worker:
        sampler = CpuSampler(os.getpid())
        sampler.start()
        row = sampler.sample()[0]
        assert row["workers"] >= 1
        worker_rss = psutil.Process(worker.pid).memory_info().rss
        assert row["workers_rss_bytes"] >= worker_rss * 0.9
    after = sampler.sample()[0]
    assert after["workers"] == row["workers"] - 1


def test_descendants_are_looked_up_once_a_period_and_known_ones_read_every_tick() -> None:
    """A lookup of the tree reads every process on the machine, so it runs once per
    TREE_LOOKUP_PERIOD_S: a worker started in between is counted from the next lookup, one
    that ended drops out at the next tick."""
    now = [0.0]
    sampler = CpuSampler(os.getpid(), clock=lambda: now[0])
    sampler.start()
    before = sampler.sample()[0]["workers"]  # the first tick looks the tree up
    with sleeping_child():
        now[0] = TREE_LOOKUP_PERIOD_S / 2
        assert sampler.sample()[0]["workers"] == before  # the known processes only
        now[0] = TREE_LOOKUP_PERIOD_S
        assert sampler.sample()[0]["workers"] == before + 1
    now[0] = TREE_LOOKUP_PERIOD_S * 1.5  # no lookup due
    assert sampler.sample()[0]["workers"] == before


def test_child_that_ended_leaves_machine_wide_rows() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = CpuSampler(gone.pid)
    sampler.start()
    gone.wait()
    rows = [sampler.sample()[0] for _ in range(2)]
    assert all("cpu_percent" in r and "rss_bytes" not in r for r in rows)


def test_missing_child_gives_a_note() -> None:
    unused_pid = 2**22 + 12345  # above the default pid_max
    sampler = CpuSampler(unused_pid)
    rows = sampler.start()
    assert len(rows) == 1 and rows[0]["kind"] == "note"
    assert str(unused_pid) in rows[0]["message"]
    assert "rss_bytes" not in sampler.sample()[0]


def test_psutil_is_injected() -> None:
    class Recorder:
        """Forwards to psutil and records which calls the sampler makes."""

        Error = psutil.Error

        def __init__(self) -> None:
            self.calls: list[str] = []

        def cpu_percent(self, **kwargs: Any) -> list[float]:
            self.calls.append("cpu_percent")
            return [1.0, 2.0]

        def Process(self, pid: int) -> psutil.Process:
            self.calls.append("Process")
            return psutil.Process(pid)

    recorder = Recorder()
    sampler = CpuSampler(os.getpid(), psutil_module=recorder)  # type: ignore[arg-type]
    sampler.start()
    assert sampler.sample()[0]["cpu_percent"] == [1.0, 2.0]
    assert recorder.calls == ["cpu_percent", "Process", "cpu_percent"]


def test_sampling_thread_writes_timed_rows(tmp_path: Path) -> None:
    out = tmp_path / "samples.jsonl"
    origin = time.monotonic()
    thread = SamplingThread(
        [CpuSampler(os.getpid())], out, origin=origin, origin_unix=time.time(), period_s=0.02
    )
    thread.start()
    deadline = time.monotonic() + scaled(10)
    while thread.ticks < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    thread.stop()
    rows = list(read_jsonl(out))
    assert rows[0]["kind"] == "clock" and rows[0]["t"] == 0.0
    cpu = [r for r in rows if r["kind"] == "cpu"]
    assert len(cpu) >= 4
    times = [r["t"] for r in cpu]
    assert times == sorted(times) and times[0] >= 0.0
    assert all(list(r)[:2] == ["kind", "t"] for r in rows)


def test_a_worker_that_starts_and_ends_between_two_readings_is_counted_as_ours() -> None:
    """A DataLoader worker of a short epoch can live between two readings: psutil's
    cpu_percent() never sees it, and its CPU would read as another process's load. Its CPU
    time reaches the parent's reaped children's times, and is counted from there."""
    sampler = CpuSampler(os.getpid())
    sampler.start()
    # Children this test process already has (under xdist: what earlier tests' runs left to
    # it) are not the burner: only the burner's own presence is checked.
    children_before = sampler.sample()[0]["workers"]
    started = time.monotonic()
    burner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
        ]
    )
    burner.wait()  # reaped: its CPU time is now in children_user/children_system
    row = sampler.sample()[0]
    elapsed = time.monotonic() - started
    assert row["workers"] == children_before  # the reaped burner is no live worker
    # At least the 0.3 s it burned, over the time between the readings.
    assert row["workers_cpu_percent"] >= 100.0 * 0.3 / (elapsed + 0.5) * 0.9
