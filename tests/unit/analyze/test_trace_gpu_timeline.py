"""GPU facts on the GPU's own timeline, over a hand-written trace worked out by hand.

One 1000 µs step; device 0, compute on stream 7, NCCL on stream 20:

    k1   100-200  launched at 10
    k2   205-300  launched at 20   gap 200-205 (5 µs, queued): launch gap
    nccl 250-500  launched at 30   overlaps k2 over 250-300 (50 µs)
    k3   600-700  launched at 40   gap 500-600 (100 µs, queued long before): dependency wait
    k4   800-900  launched at 795  gap 700-800 (launched after the gap began): host wait

Launch calls last 4 µs; an op counts as queued once its call returned. The host runs one
op (aten::linear) from 0 to 800, inside which it launches. The window is the
step, 0-1000 µs (the GPU runs inside it); busy 100-200, 205-500, 600-700, 800-900 = 595 µs.
Before k1 (0-100): nothing queued until 14, then k1 waits 86 µs to start: 14 host wait,
86 dependency wait. After k4 (900-1000): nothing queued while the host runs an op on the CPU
(905-1000): host wait.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfdoctor.analyze.trace import load_trace
from perfdoctor.analyze.trace_gpu import (
    HOST_QUIET_MIN_US,
    LAUNCH_CALL_OUTLIER_US,
    LAUNCH_GAP_MAX_US,
)

KERNELS = [  # name, stream, start, dur, launch ts
    ("k1_gemm", 7, 100, 100, 10),
    ("k2_relu", 7, 205, 95, 20),
    ("ncclDevKernel_AllReduce_Sum_f32", 20, 250, 250, 30),
    ("k3_gemm", 7, 600, 100, 40),
    ("k4_add", 7, 800, 100, 795),
]


def _trace(tmp_path: Path, *, host_tail: bool = True) -> Path:
    """`host_tail`: the host records an op after its last launch, to the end of the step."""
    events: list[dict] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::linear",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 800,
        },
    ]
    if host_tail:
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::add_",
                "pid": 1,
                "tid": 1,
                "ts": 905,
                "dur": 95,
            }
        )
    for corr, (name, stream, ts, dur, launch) in enumerate(KERNELS, start=1):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": launch,
                "dur": 4,
                "args": {"correlation": corr},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr, "device": 0, "stream": stream},
            }
        )
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_idle_split_tells_launch_gaps_from_dependency_and_host_waits(tmp_path: Path) -> None:
    g = load_trace(_trace(tmp_path)).gpu
    assert g is not None
    assert 5 <= LAUNCH_GAP_MAX_US < 100
    assert g.window_us == pytest.approx(1000)
    assert g.busy_frac == pytest.approx(595 / 1000)
    assert g.idle_launch_gap_frac == pytest.approx(5 / 1000)
    assert g.idle_dependency_wait_frac == pytest.approx((86 + 100) / 1000)
    assert g.idle_host_wait_frac == pytest.approx((14 + 100 + 100) / 1000)
    total = g.busy_frac + g.idle_launch_gap_frac + g.idle_dependency_wait_frac
    assert total + g.idle_host_wait_frac == pytest.approx(1.0)


def test_a_late_launch_that_then_waits_is_host_wait_then_dependency(tmp_path: Path) -> None:
    """k4's launch returned at 754, 54 µs into the gap, yet it starts at 800: 54 µs of host
    wait, then 46 µs queued behind something else."""
    g = load_trace(_with_k4_launch(_trace(tmp_path), ts=750)).gpu
    assert g is not None
    assert g.idle_host_wait_frac == pytest.approx((14 + 54 + 100) / 1000)
    assert g.idle_dependency_wait_frac == pytest.approx((86 + 100 + 46) / 1000)


def test_host_wait_split_by_what_the_launching_thread_did(tmp_path: Path) -> None:
    """In the DataLoader for most of a host-wait gap: its time there is data; otherwise, with
    no sync: busy."""
    path = _trace(tmp_path)
    data = json.loads(path.read_text())
    data["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "pid": 1,
            "tid": 1,
            "ts": 700,
            "dur": 90,
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        }
    )
    path.write_text(json.dumps(data))
    g = load_trace(path).gpu
    assert g is not None
    # Only the DataLoader's own 90 µs of the 100 µs gap: the idle "input data" never
    # exceeds the time the host spent in the DataLoader (issue 32).
    assert g.idle_host_data_frac == pytest.approx(90 / 1000)
    assert g.idle_host_busy_frac == pytest.approx((14 + 100 + 10) / 1000)  # before k1, after k4
    g = load_trace(_trace(tmp_path)).gpu
    assert g is not None
    assert g.idle_host_busy_frac == pytest.approx((14 + 100 + 100) / 1000)
    assert g.idle_host_data_frac == g.idle_host_sync_frac == 0


def test_host_wait_after_a_sync_that_drained_the_queue(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    data = json.loads(path.read_text())
    data["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "pid": 1,
            "tid": 1,
            "ts": 300,
            "dur": 410,
            "name": "cudaStreamSynchronize",
            "args": {"correlation": 99},
        }
    )
    path.write_text(json.dumps(data))
    g = load_trace(path).gpu
    assert g is not None
    assert g.idle_host_sync_frac == pytest.approx(100 / 1000)
    assert g.idle_host_busy_frac == pytest.approx((14 + 100) / 1000)


def test_communication_exposed_and_overlapped(tmp_path: Path) -> None:
    g = load_trace(_trace(tmp_path)).gpu
    assert g is not None
    assert g.comm_frac == pytest.approx(250 / 1000)
    assert g.comm_overlap_frac == pytest.approx(50 / 250)
    assert g.comm_exposed_frac == pytest.approx(200 / 1000)
    assert g.compute_frac == pytest.approx((100 + 95 + 100 + 100) / 1000)


def test_top_kernels_and_counts(tmp_path: Path) -> None:
    g = load_trace(_trace(tmp_path)).gpu
    assert g is not None
    assert g.kernel_count == 5 and g.launch_count == 5 and g.unlaunched_count == 0
    top = g.top_kernels[0]
    assert top.name.startswith("ncclDevKernel") and top.comm
    assert top.share == pytest.approx(250 / 645)
    assert sum(k.share for k in g.top_kernels) == pytest.approx(1.0)


def test_window_follows_the_gpu_when_it_runs_behind_the_host(tmp_path: Path) -> None:
    """A kernel launched in the step but running after it ends stays in the window."""
    path = _trace(tmp_path)
    data = json.loads(path.read_text())
    data["traceEvents"][0]["dur"] = 798  # the host's step ends before k4 runs
    path.write_text(json.dumps(data))
    g = load_trace(path).gpu
    assert g is not None
    assert g.window_us == pytest.approx(900)
    assert g.gpu_tail_ms == pytest.approx((900 - 798) / 1000)


def test_a_kernel_without_any_runtime_event_does_not_crash(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel"}]}))
    g = load_trace(path).gpu
    assert g is None or g.busy_frac is None or 0 <= g.busy_frac <= 1


def _with(path: Path, *events: dict) -> Path:
    data = json.loads(path.read_text())
    data["traceEvents"].extend(events)
    path.write_text(json.dumps(data))
    return path


def test_a_short_sync_then_host_work_is_mostly_host_busy(tmp_path: Path) -> None:
    """A 10 µs sync returns at 705, 5 µs into the 700-800 gap; the host then runs Python and
    ops until it launches k4 at 795. The sync explains only its 10 µs of blocking and the
    issuing of k4 (795-800): removing it gains the host a 10 µs lead, not the 100 µs gap."""
    path = _with(
        _trace(tmp_path),
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "pid": 1,
            "tid": 1,
            "ts": 695,
            "dur": 10,
            "name": "cudaDeviceSynchronize",
            "args": {"correlation": 99},
        },
        {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 710, "dur": 80, "name": "aten::mul"},
    )
    g = load_trace(path).gpu
    assert g is not None
    assert g.idle_host_sync_frac == pytest.approx((10 + 5) / 1000)
    assert g.idle_host_busy_frac == pytest.approx((14 + 85 + 100) / 1000)
    assert g.idle_host_wait_frac == pytest.approx((14 + 100 + 100) / 1000)


def test_the_tail_with_no_host_work_recorded_is_its_own_share(tmp_path: Path) -> None:
    """Without the host's op after k4, its launching thread records nothing after 799 (the
    launch call's end) while the step runs to 1000: the 100 µs after k4 are the trace's
    tail, still host wait (nothing queued) but neither host busy nor after a sync."""
    path = _with(
        _trace(tmp_path, host_tail=False),
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "pid": 1,
            "tid": 1,
            "ts": 880,
            "dur": 30,
            "name": "cudaStreamSynchronize",
            "args": {"correlation": 99},
        },
    )
    g = load_trace(path).gpu
    assert g is not None
    # The sync returns at 910, 10 µs into the gap after k4: those 10 µs are the sync's (it
    # blocked 30), the 90 that follow, with nothing recorded, are the tail.
    assert g.idle_host_sync_frac == pytest.approx(10 / 1000)
    assert g.idle_host_unrecorded_frac == pytest.approx(90 / 1000)
    assert g.idle_host_busy_frac == pytest.approx((14 + 100) / 1000)  # before k1 and k4
    assert g.idle_host_wait_frac == pytest.approx((14 + 100 + 100) / 1000)


def test_the_tail_is_host_busy_while_the_step_thread_records_work(tmp_path: Path) -> None:
    """k4 launched from another thread (the autograd engine's): that thread then records
    nothing, but the thread running the step does (905-1000): the host is busy, no tail."""
    g = load_trace(_with_k4_launch(_trace(tmp_path), tid=2)).gpu
    assert g is not None
    assert g.idle_host_unrecorded_frac == 0
    assert g.idle_host_busy_frac == pytest.approx((14 + 100 + 100) / 1000)


def _with_k4_launch(path: Path, **fields: float) -> Path:
    """The trace with k4's launch call (correlation 5) changed: its start, its thread."""
    data = json.loads(path.read_text())
    launch = next(e for e in data["traceEvents"] if e.get("args", {}).get("correlation") == 5)
    launch.update(fields)
    path.write_text(json.dumps(data))
    return path


def _host_op_until(path: Path, end: float) -> Path:
    """The fixture with the host's op (aten::linear) ending at `end` instead of 800, and k4
    launched from an op of its own (aten::add, 795-810)."""
    data = json.loads(path.read_text())
    op = next(e for e in data["traceEvents"] if e.get("name") == "aten::linear")
    op["dur"] = end
    data["traceEvents"].append({**op, "name": "aten::add", "ts": 795, "dur": 15})
    path.write_text(json.dumps(data))
    return path


def test_a_long_mid_trace_stretch_with_nothing_recorded_is_unrecorded(tmp_path: Path) -> None:
    """The host's op ends at 500 and nothing is recorded until k4's launch call at 795: of
    the 700-800 host-wait gap, 700-795 shows no host work at all (a stretch of 295 µs, over
    HOST_QUIET_MIN_US): unrecorded, not host busy. The 500-600 gap is queued work (k3):
    a dependency wait, whatever the host did."""
    assert HOST_QUIET_MIN_US < 295
    g = load_trace(_host_op_until(_trace(tmp_path), 500)).gpu
    assert g is not None
    assert g.idle_host_unrecorded_frac == pytest.approx(95 / 1000)
    assert g.idle_host_busy_frac == pytest.approx((14 + 5 + 100) / 1000)
    assert g.idle_host_wait_frac == pytest.approx((14 + 100 + 100) / 1000)
    assert g.idle_dependency_wait_frac == pytest.approx((86 + 100) / 1000)


def test_a_short_quiet_stretch_between_ops_stays_host_busy(tmp_path: Path) -> None:
    """Nothing recorded from 720 to the launch at 795: 75 µs, the Python between two ops
    that fusion removes, shorter than HOST_QUIET_MIN_US: host busy."""
    assert HOST_QUIET_MIN_US > 75
    g = load_trace(_host_op_until(_trace(tmp_path), 720)).gpu
    assert g is not None
    assert g.idle_host_unrecorded_frac == 0
    assert g.idle_host_busy_frac == pytest.approx((14 + 100 + 100) / 1000)


def test_launch_call_cost_is_the_mean_launch_call_without_outliers(tmp_path: Path) -> None:
    """The five 4 µs cudaLaunchKernel calls; a 5 ms one (lazy module loading) is not the cost
    of a launch and stays out of the mean."""
    g = load_trace(_trace(tmp_path)).gpu
    assert g is not None
    assert g.launch_call_us_mean == pytest.approx(4.0)
    slow = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    path = _with(_trace(tmp_path), {**slow, "ts": 950, "dur": 5000, "args": {"correlation": 77}})
    g = load_trace(path).gpu
    assert g is not None
    assert LAUNCH_CALL_OUTLIER_US < 5000
    assert g.launch_call_us_mean == pytest.approx(4.0)


def test_an_annotation_in_a_mid_trace_stretch_is_recorded_host_work(tmp_path: Path) -> None:
    """The stretch of the test above (nothing recorded 500-795) is covered by a
    record_function range (user annotation, 490-800): the host recorded work there, as the
    trace's tail counts it, so the 700-800 gap is host busy, not unrecorded."""
    path = _with(
        _host_op_until(_trace(tmp_path), 500),
        {"ph": "X", "cat": "user_annotation", "name": "## backward ##", "pid": 1, "tid": 1}
        | {"ts": 490, "dur": 310},
    )
    g = load_trace(path).gpu
    assert g is not None
    assert g.idle_host_unrecorded_frac == 0
    assert g.idle_host_busy_frac == pytest.approx((14 + 100 + 100) / 1000)


def _op(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_launching_ops_host_time_is_the_union_of_the_outermost_ops(tmp_path: Path) -> None:
    """The fixture's aten::linear (0-800) holds k1-k4's launches; k5 is launched at 950 from
    aten::mul (940-970) nested in aten::add_ (905-1000): the outermost ops that launch are
    0-800 and 905-1000, each counted once whatever nests in it. An op that launches nothing
    (aten::view on thread 2, 820-900) and the ProfilerStep span do not count. Inside
    aten::linear, a 30 µs sync (100-130), a 60 µs cudaMalloc (300-360) and a 70 µs nested op
    that launches nothing (500-570: set-up) are left out: CUDA graphs remove none of them; a
    20 µs runtime call and a 2 µs nested op stay. The window is the step, 0-1000."""
    rt = {"ph": "X", "cat": "cuda_runtime", "pid": 1, "tid": 1}
    path = _with(
        _trace(tmp_path),
        _op("aten::mul", 940, 30),
        _op("aten::empty", 945, 2),
        _op("aten::view", 820, 80, tid=2),
        _op("aten::empty_strided", 500, 70),
        {**rt, "name": "cudaLaunchKernel", "ts": 950, "dur": 4, "args": {"correlation": 50}},
        {**rt, "name": "cudaStreamSynchronize", "ts": 100, "dur": 30, "args": {"correlation": 51}},
        {**rt, "name": "cudaMalloc", "ts": 300, "dur": 60, "args": {"correlation": 52}},
        {**rt, "name": "cudaGetDevice", "ts": 400, "dur": 20, "args": {"correlation": 53}},
    )
    g = load_trace(path).gpu
    assert g is not None
    assert 20 < LAUNCH_CALL_OUTLIER_US < 60
    assert g.launch_ops_host_frac == pytest.approx((800 - 30 - 60 - 70 + 95) / 1000)


def test_launches_outside_any_op_leave_the_launching_ops_time_unknown(tmp_path: Path) -> None:
    """No CPU op around any launch: the trace says nothing of the host path of a launch."""
    data = json.loads(_trace(tmp_path, host_tail=False).read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "cpu_op"]
    path = tmp_path / "no_ops.json"
    path.write_text(json.dumps(data))
    g = load_trace(path).gpu
    assert g is not None and g.launch_ops_host_frac is None
