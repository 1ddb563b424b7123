"""Per-step device time from CUDA events, against a fake `torch.cuda` whose GPU runs behind the
host: the host's step interval is the launch time, the device's is the work."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from perfdoctor import rundir
from perfdoctor.collect.device_clock import DeviceStepClock
from perfdoctor.collect.step_log import StepLog
from perfdoctor.model import StepRecord


class FakeGpu:
    """A queue: each step's work takes `work_ms` on the GPU, the host enqueues it in no time."""

    def __init__(self, work_ms: float) -> None:
        self.work_ms = work_ms
        self.queued_ms = 0.0  # GPU time at which the work queued so far finishes
        self.syncs = 0

    def enqueue_step(self) -> None:
        self.queued_ms += self.work_ms


class FakeEvent:
    def __init__(self, gpu: FakeGpu, *, enable_timing: bool = False) -> None:
        assert enable_timing
        self.gpu = gpu
        self.at_ms: float | None = None

    def record(self) -> None:
        self.at_ms = self.gpu.queued_ms

    def synchronize(self) -> None:
        self.gpu.syncs += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at_ms is not None and end.at_ms is not None
        return end.at_ms - self.at_ms


def fake_torch(gpu: FakeGpu) -> Any:
    return SimpleNamespace(
        cuda=SimpleNamespace(Event=lambda enable_timing=False: FakeEvent(gpu, enable_timing=True))
    )


def test_each_step_gets_the_gpu_time_between_its_start_and_the_next() -> None:
    gpu = FakeGpu(work_ms=5.0)
    clock = DeviceStepClock(fake_torch(gpu))
    for index in range(4):
        clock.mark(index)
        gpu.enqueue_step()
    # Steps 0..2 closed; step 3 is open: its start event ends step 2.
    assert clock.durations([0, 1, 2]) == {0: 5.0, 1: 5.0, 2: 5.0}
    assert gpu.syncs == 1  # one wait per flush, none per step
    # At the end, the last closed step ends at an event recorded now.
    assert clock.durations([3]) == {3: 5.0}


def test_a_broken_context_turns_device_timing_off_without_raising() -> None:
    def broken(enable_timing: bool = False) -> Any:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    clock = DeviceStepClock(SimpleNamespace(cuda=SimpleNamespace(Event=broken)))
    clock.mark(0)
    assert clock.failed is not None and "illegal memory access" in clock.failed
    assert clock.durations([0]) == {}


def test_step_log_writes_device_ms_and_step_ms_prefers_it(tmp_path: Path) -> None:
    gpu = FakeGpu(work_ms=8.0)
    log = StepLog(tmp_path, origin=0.0)
    log.device_clock = DeviceStepClock(fake_torch(gpu))
    for index in range(3):
        log.device_clock.mark(index)
        gpu.enqueue_step()
        # The host ran ahead: 0.5 ms per step on its own clock.
        log.add({"index": index, "phase": "timed", "wall_ms": 0.5, "loss": None}, ())
    log.flush()
    rows = [json.loads(line) for line in (tmp_path / rundir.STEPS_FILE).read_text().splitlines()]
    assert [r["device_ms"] for r in rows] == [8.0, 8.0, 8.0]
    steps = rundir.load_steps(tmp_path)  # through the schema, as the analysis reads them
    assert [s.step_ms for s in steps] == [8.0, 8.0, 8.0]
    assert StepRecord(index=0, phase="timed", wall_ms=0.5).step_ms == 0.5  # CPU: host clock
