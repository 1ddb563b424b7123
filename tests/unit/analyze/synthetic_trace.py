"""Small hand-written kineto traces (current format) for `perfdoctor diagnose` tests.

`input_bound_trace` is shaped like a ResNet step with num_workers=0: each ProfilerStep opens
with a DataLoader `__next__` span that takes `data_frac` of the step (the GPU idles meanwhile),
then convolutions whose kernels keep the GPU busy. A correct diagnosis is input-bound, not
launch-bound: the GPU's idle time is the data wait, not launch overhead.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"

A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "totalGlobalMem": 42_297_524_224,
    "computeMajor": 8,
    "computeMinor": 0,
    "warpSize": 32,
    "numSms": 108,
}
MI250 = {
    "id": 0,
    "name": "AMD Instinct MI250X",
    "totalGlobalMem": 68_702_699_520,
    "computeMajor": 9,
    "computeMinor": 0,
    "warpSize": 64,
}


def input_bound_trace(
    *,
    steps: int = 6,
    step_us: float = 30_000.0,
    data_frac: float = 1 / 3,
    kernels_per_step: int = 40,
    loader: str | None = SINGLE,
    rank: int | None = None,
    world_size: int | None = None,
    device: dict[str, Any] | None = None,
    step_offset: int = 0,
    extra_data_us: float = 0.0,
) -> dict[str, Any]:
    """A kineto trace dict; `extra_data_us` lengthens every DataLoader span (a slow rank)."""
    pid, tid = 1000, 1000
    events: list[dict[str, Any]] = []
    corr = 1
    data_us = step_us * data_frac + extra_data_us
    full_step = step_us + extra_data_us
    for i in range(steps):
        start = 1_000.0 + i * full_step
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i + step_offset}",
                "pid": pid,
                "tid": tid,
                "ts": start,
                "dur": full_step - 1.0,
            }
        )
        if loader:
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": loader,
                    "pid": pid,
                    "tid": tid,
                    "ts": start + 2.0,
                    "dur": data_us,
                }
            )
        compute_start = start + data_us + 10.0
        slot = (full_step - data_us - 50.0) / kernels_per_step
        for k in range(kernels_per_step):
            t = compute_start + k * slot
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::conv2d" if k % 2 == 0 else "aten::relu",
                    "pid": pid,
                    "tid": tid,
                    "ts": t,
                    "dur": 20.0,
                    "args": {"External id": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": tid,
                    "ts": t + 5.0,
                    "dur": 8.0,
                    "args": {"External id": corr, "correlation": corr},
                }
            )
            # Kernels fill ~95% of their slot: the GPU keeps up once data is there.
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "implicit_convolve_sgemm" if k % 2 == 0 else "elementwise_kernel",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 15.0,
                    "dur": slot * 0.95,
                    "args": {"correlation": corr, "device": 0, "stream": 7, "External id": corr},
                }
            )
            corr += 1
    trace: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [device or A100],
        "traceEvents": events,
    }
    if rank is not None:
        trace["distributedInfo"] = {
            "backend": "nccl",
            "rank": rank,
            "world_size": world_size or 2,
        }
    return trace


def write_trace(path: Path, trace: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path
