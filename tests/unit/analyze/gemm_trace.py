"""A small hand-written GPU trace of GEMM-like ops with shapes, their kernels and launches:
FLOPs, precision and MFU tests build on it (test_flop_rate.py, render/test_compute_section.py)."""

from __future__ import annotations

from typing import Any

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0}
MM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_cublas"
FP8 = "void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u>(float*)"


def gemm_trace(
    ops: list[tuple[str, list[Any], list[str], str, float]],
    device: dict[str, Any] | None = H100,
    step_us: float = 10_000.0,
) -> dict[str, Any]:
    """One ProfilerStep; each op (name, Input Dims, Input type, kernel, kernel µs) runs in
    turn with its kernel launched inside it; an elementwise kernel follows each."""
    pid = tid = 1
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            "pid": pid,
            "tid": tid,
            "ts": 0.0,
            "dur": step_us,
        },
    ]
    t, corr = 100.0, 1
    for name, dims, types, kernel, kernel_us in ops:
        for kname, dur, op in ((kernel, kernel_us, name), ("elementwise_kernel", 5.0, None)):
            if op is not None:
                events.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": op,
                        "pid": pid,
                        "tid": tid,
                        "ts": t,
                        "dur": 30.0,
                        "args": {"Input Dims": dims, "Input type": types},
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
                    "dur": 10.0,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 20.0,
                    "dur": dur,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
            corr += 1
            t += max(dur, 40.0) + 40.0
    trace: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if device is not None:
        trace["deviceProperties"] = [device]
    return trace
