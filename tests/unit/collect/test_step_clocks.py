"""The per-step readings that are system calls: the thread's CPU clock and the RSS.

Each read is a system call (no vDSO for CPU clocks; /proc/self/statm for RSS), microseconds
on a virtual machine, where a null step takes ~400 us (issue 30): the CPU clock is read once
per step change, not twice, and the RSS at most once a millisecond. The rows must still say
what each step used.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect import probes as probes_mod
from perfdoctor.collect.probes import Probes, RssReader
from perfdoctor.collect.probes_steps import ClosedStep
from perfdoctor.collect.runtime import Runtime
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import STEPS_FILE, read_jsonl


def test_rss_is_read_at_most_once_a_millisecond() -> None:
    reader = RssReader()
    first = reader.read(10.0)
    assert isinstance(first, int) and first > 0
    assert reader.read(10.0005) is None  # within the interval: no read
    assert isinstance(reader.read(10.0011), int)
    assert isinstance(reader.read(), int)  # asked outright: always read


def _probes(run_dir: Path, *, run_to_end: bool = False) -> Probes:
    """Probes over a run directory, nothing installed into torch."""
    spec = RunSpec(
        label="baseline",
        target=Target(kind="script", name="train.py", argv=()),
        cwd=str(run_dir),
        run_dir=str(run_dir),
        plan=StepPlan(warmup_steps=1, timed_steps=200, profiled_steps=0),
        profile=False,
        run_to_end=run_to_end,
    )
    return Probes(Runtime(spec), torch, UserCode.for_target(run_dir, str(run_dir)), 0.0)


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_each_step_keeps_its_own_cpu_time_with_one_clock_read_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = _probes(tmp_path)
    reads = [0]
    real = time.thread_time

    def counted() -> float:
        reads[0] += 1
        return real()

    burns = [0.002 if i % 2 else 0.02 for i in range(60)]  # 2 ms and 20 ms of CPU, alternating
    clock = time.perf_counter
    for index, burn in enumerate(burns):
        monkeypatch.setattr(probes_mod.time, "thread_time", counted)
        probes.step_started(index)
        start = clock()
        monkeypatch.setattr(probes_mod.time, "thread_time", real)
        _burn(burn)
        monkeypatch.setattr(probes_mod.time, "thread_time", counted)
        step = ClosedStep(index=index, start=start)
        step.end = clock()
        step.losses = ()
        probes.step_closed(step)
    monkeypatch.setattr(probes_mod.time, "thread_time", real)
    probes.step_log.close()
    rows: list[dict[str, Any]] = list(read_jsonl(tmp_path / STEPS_FILE))
    assert [r["index"] for r in rows] == list(range(60))
    for row, burn in zip(rows, burns, strict=True):
        # Its own burn, and not the neighbour's (they differ tenfold).
        assert burn * 1000.0 <= row["cpu_ms"] < burn * 1000.0 + 5.0, (row["index"], row)
    # One read per step change, one more at the first start and after each flush.
    flushes = len(burns) // 50 + 2  # FLUSH_EVERY, and the phase ends (warm-up, the plan)
    assert reads[0] <= len(burns) + 1 + flushes
