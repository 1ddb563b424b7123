"""Small hand-written kineto traces of collectives, one per family, for the communication
tests: the kernel names each library emits, launched from the host op that names the
collective, with or without kineto's message-size args."""

from __future__ import annotations

from typing import Any

V100 = {"id": 0, "name": "Tesla V100-SXM2-32GB", "computeMajor": 7, "computeMinor": 0}
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}
PID, TID = 100, 100


def collective_trace(
    kernels: list[dict[str, Any]],
    *,
    device: dict[str, Any] | None = None,
    rank: int = 0,
    world_size: int = 8,
    compute_us: float = 100.0,
) -> dict[str, Any]:
    """One ProfilerStep; per entry of `kernels` (keys: name, dur, and optionally host: the
    host span around the launch, args: the kernel's own args, host_args: record_param_comms
    args), a compute kernel of `compute_us` then the collective kernel on its own stream,
    launched from inside the host span."""
    events: list[dict[str, Any]] = []
    t = 10.0
    corr = 1
    for k in kernels:
        # compute kernel
        events.append(_runtime(t, corr))
        events.append(_kernel("volta_sgemm_128x64_nn", t + 5, compute_us, corr, stream=7))
        corr += 1
        t += compute_us + 10
        host = k.get("host")
        if host:
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": host, "ts": t, "dur": 8,
                 "pid": PID, "tid": TID}
            )  # fmt: skip
        if k.get("host_args") is not None:
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": t + 1,
                 "dur": 6, "pid": PID, "tid": TID, "args": k["host_args"]}
            )  # fmt: skip
        events.append(_runtime(t + 2, corr))
        events.append(_kernel(k["name"], t + 6, k["dur"], corr, stream=20, extra=k.get("args")))
        corr += 1
        t += k["dur"] + 10
    events.insert(
        0,
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0, "dur": t + 10,
         "pid": PID, "tid": TID},
    )  # fmt: skip
    return {
        "traceEvents": events,
        "deviceProperties": [device or V100],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
    }


def _runtime(ts: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 3,
        "pid": PID, "tid": TID, "args": {"correlation": corr},
    }  # fmt: skip


def _kernel(
    name: str, ts: float, dur: float, corr: int, *, stream: int, extra: dict | None = None
) -> dict[str, Any]:
    args = {"correlation": corr, "device": 0, "stream": stream, **(extra or {})}
    return {
        "ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0,
        "tid": stream, "args": args,
    }  # fmt: skip


def sized(collective: str, nelems: int, group: int = 8, dtype: str = "Float") -> dict[str, Any]:
    """kineto's args of a collective (record_param_comms, and NCCL kernels since torch 2.2)."""
    return {
        "Collective name": collective,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "Group size": group,
        "dtype": dtype,
    }
