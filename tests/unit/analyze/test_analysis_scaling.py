"""No analysis step may turn quadratic in the trace's events (issue 30).

A per-row read of a whole-column value (a property that recomputes `ts + dur` over every
event, read once per collective) made the communication summary O(rows x events): linear on
small traces, 2.5 s of a 183 MB one. Each stage of `diagnose` (parse to report) runs here on
a synthetic GPU trace of n steps and of 4n steps, in the same process, and only the ratio of
its times at the two sizes is compared: linear work grows ~4x (less, with fixed costs),
quadratic work ~16x. Stage by stage, so a quadratic part shows even where the whole run
would hide it. CPU seconds, the minimum of three repeats with the garbage collector off, so
a loaded machine slows both sizes alike; no absolute time is asserted.

The trace is dense in what the per-row loops of analyze/ walk: collectives (host span,
record_param_comms with message sizes, launch, NCCL kernel), GEMMs with shapes, copies,
syncs, DataLoader spans, Python stacks.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from perfdoctor.analyze.comm_trace import summarize_comm
from perfdoctor.analyze.trace import TraceSummary, summarize_trace
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.analyze.trace_index import find_steps
from perfdoctor.analyze.trace_inputs import discover
from perfdoctor.analyze.trace_record import load_trace_run, steps_from_trace
from perfdoctor.diagnose_traces import build_trace_report

STEPS = 120  # the small trace: 40 events per step
GROWTH = 4
# 4x the events: linear work stays near 4x, n log n near 4.5x; quadratic work is 16x.
MAX_RATIO = 10.0
REPEATS = 3
MIN_MEASURED_S = 0.01

PID, TID, DEVICE = 1000, 1000, 0
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}


def _x(cat: str, name: str, ts: float, dur: float, args: dict | None = None, **where: Any):
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": PID, "tid": TID}
    event.update(where)
    if args is not None:
        event["args"] = args
    return event


def scaling_trace(steps: int) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    corr = 1
    py_id = 1
    step_us = 1_000.0
    for i in range(steps):
        t0 = 10.0 + i * step_us
        events.append(_x("user_annotation", f"ProfilerStep#{i}", t0, step_us - 1))
        events.append(
            _x(
                "user_annotation",
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                t0 + 1,
                40,
            )
        )
        root = py_id
        events.append(_x("python_function", "train.py(20): <module>", t0 + 0.5, step_us - 3,
                         {"Python id": root, "Python parent id": 0}))  # fmt: skip
        py_id += 1
        t = t0 + 50
        # a host-to-device copy of the batch
        events.append(_x("cpu_op", "aten::copy_", t, 10, {"External id": corr}))
        events.append(_x("cuda_runtime", "cudaMemcpyAsync", t + 2, 5,
                         {"External id": corr, "correlation": corr}))  # fmt: skip
        events.append(_x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t + 8, 6,
                         {"correlation": corr, "device": DEVICE, "stream": 7, "bytes": 4096},
                         pid=DEVICE, tid=7))  # fmt: skip
        corr += 1
        t += 20
        for k in range(4):
            # a GEMM with its shapes, under a Python frame
            events.append(_x("python_function", "model.py(12): forward", t, 30,
                             {"Python id": py_id, "Python parent id": root}))  # fmt: skip
            py_id += 1
            events.append(_x("cpu_op", "aten::mm", t + 1, 25,
                             {"External id": corr, "Input Dims": [[64, 384], [384, 384]],
                              "Input type": ["float", "float"]}))  # fmt: skip
            events.append(_x("cuda_runtime", "cudaLaunchKernel", t + 5, 6,
                             {"External id": corr, "correlation": corr}))  # fmt: skip
            events.append(_x("kernel", "volta_sgemm_128x64_nn", t + 12, 30,
                             {"correlation": corr, "device": DEVICE, "stream": 7,
                              "External id": corr}, pid=DEVICE, tid=7))  # fmt: skip
            corr += 1
            t += 40
            # a collective: the host span, record_param_comms with the message, the kernel
            events.append(_x("user_annotation", "nccl:all_reduce", t, 12))
            events.append(_x("cpu_op", "record_param_comms", t + 1, 10,
                             {"External id": corr, "Collective name": "allreduce",
                              "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                              "Group size": 8, "dtype": "Float"}))  # fmt: skip
            events.append(_x("cuda_runtime", "cudaLaunchKernel", t + 3, 5,
                             {"External id": corr, "correlation": corr}))  # fmt: skip
            events.append(_x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 9, 60 + k,
                             {"correlation": corr, "device": DEVICE, "stream": 20},
                             pid=DEVICE, tid=20))  # fmt: skip
            corr += 1
            t += 70
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", t, 30, {"correlation": corr}))
        corr += 1
        events.append(_x("cpu_op", "Optimizer.step#SGD.step", t + 40, 50, {"External id": corr}))
        corr += 1
    return {
        "schemaVersion": 1,
        "deviceProperties": [A100],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "traceEvents": events,
    }


def _write(tmp_path: Path, steps: int) -> Path:
    path = tmp_path / f"s{steps}" / "rank0.pt.trace.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(scaling_trace(steps)))
    return path


def _times(run: Callable[[], object], count: int) -> Callable[[], object]:
    def repeated() -> None:
        for _ in range(count):
            run()

    return repeated


def _cpu_seconds(run: Callable[[], object], repeats: int = REPEATS) -> float:
    """CPU seconds of one call, the minimum of `repeats` (the caller turns the garbage
    collector off, so that a collection of earlier garbage lands in neither size)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return max(best, 1e-4)


def _stages(path: Path, out: Path) -> dict[str, Callable[[], object]]:
    ev = parse_trace(path)
    record = load_trace_run(discover([path]).runs[0])
    return {
        "parse_trace": lambda: parse_trace(path),
        "find_steps": lambda: find_steps(ev),
        # Apart from the whole summary: the communication part, whose loop once was quadratic
        # (the GPU and compute parts are most of the whole's time, so it would show them).
        "summarize_comm": lambda: summarize_comm(ev),
        "summarize_trace": lambda: summarize_trace(ev),
        "steps_from_trace": lambda: steps_from_trace(ev),
        "build_trace_report": lambda: build_trace_report(record, out_dir=out),
    }


def test_no_analysis_stage_grows_faster_than_the_events(tmp_path: Path) -> None:
    small = _stages(_write(tmp_path, STEPS), tmp_path / "out")
    big = _stages(_write(tmp_path, GROWTH * STEPS), tmp_path / "out")
    # The trace really exercises the communication summary and the step paths.
    summary = big["summarize_trace"]()
    assert isinstance(summary, TraceSummary) and summary.steps == GROWTH * STEPS
    assert summary.comm is not None and summary.comm.kinds[0].count == 4 * GROWTH * STEPS
    ratios = {}
    gc.collect()
    gc.disable()
    try:
        for name in small:
            small[name]()  # warm: imports and first-call caches belong to neither size
            # A quick stage runs several times per measurement, the same number at both
            # sizes, so that no measurement is shorter than a scheduler's time slice.
            times = max(1, round(MIN_MEASURED_S / _cpu_seconds(small[name], repeats=1)))
            ratios[name] = _cpu_seconds(_times(big[name], times)) / _cpu_seconds(
                _times(small[name], times)
            )
    finally:
        gc.enable()
    grown = {name: f"{r:.1f}x" for name, r in ratios.items() if r >= MAX_RATIO}
    assert not grown, f"{GROWTH}x the events cost {grown} the CPU time: quadratic? {ratios}"


def test_a_tables_end_column_is_computed_once(tmp_path: Path) -> None:
    # Loops read `table.end[row]` per row: a property that recomputed `ts + dur` on every
    # read made them O(rows x events) (issue 30), which the timing above cannot see below
    # traces of hundreds of MB (numpy adds a column in microseconds).
    ev = parse_trace(_write(tmp_path, 2))
    for table in (ev.cpu_ops, ev.annotations, ev.gpu, ev.runtime, ev.python):
        assert table.end is table.end
        assert np.array_equal(table.end, table.ts + table.dur)
