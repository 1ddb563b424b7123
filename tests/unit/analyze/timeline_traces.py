"""Small hand-written kineto traces for the timeline tests (issue 22 parts 2, 3, 4, 6, 8)."""

from __future__ import annotations

from typing import Any

A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "totalGlobalMem": 42_297_524_224,
    "computeMajor": 8,
    "computeMinor": 0,
}
PID, TID = 1000, 1000


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr, "device": 0, "stream": 7, "External id": corr},
    }


def _launch(
    events: list[dict[str, Any]],
    t: float,
    corr: int,
    kernel_us: float,
    name: str = "aten::mm",
    gpu: bool = True,
) -> None:
    events.append(_x("cpu_op", name, t, 20.0, **{"External id": corr}))
    events.append(
        _x(
            "cuda_runtime",
            "cudaLaunchKernel",
            t + 5.0,
            8.0,
            correlation=corr,
            **{"External id": corr},
        )
    )
    if gpu:
        events.append(_kernel("ampere_sgemm_128x64_nn", t + 15.0, kernel_us, corr))


def trace(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schemaVersion": 1, "deviceProperties": [A100], "traceEvents": events}


def allocator_storm(
    *,
    steps: int = 3,
    frees_per_step: int = 60,
    with_steps: bool = True,
    empty_cache: bool = False,
    free_call: str = "cudaFree",
    malloc_call: str = "cudaMalloc",
) -> dict[str, Any]:
    """Each step: a few kernels, then a run of cudaFree/cudaMalloc pairs during which the GPU
    idles (each cudaFree waits for the device): the caching allocator off or emptied."""
    events: list[dict[str, Any]] = []
    corr = 1
    step_us = 20_000.0
    for s in range(steps):
        start = 1_000.0 + s * step_us
        if with_steps:
            events.append(_x("user_annotation", f"ProfilerStep#{s}", start, step_us - 1.0))
        t = start + 10.0
        for _ in range(10):
            _launch(events, t, corr, 300.0)
            corr += 1
            t += 320.0
        t += 300.0  # the last kernel ends; then the allocator churns
        if empty_cache:
            events.append(_x("python_function", "torch/cuda/memory.py(192): empty_cache", t, 50.0))
        for _ in range(frees_per_step):
            events.append(_x("cuda_runtime", free_call, t, 120.0))
            events.append(_x("cuda_runtime", malloc_call, t + 125.0, 60.0))
            t += 190.0
        _launch(events, t, corr, 300.0)
        corr += 1
    return trace(events)


def lost_gpu_side(launches: int = 260) -> dict[str, Any]:
    """Launch calls on the host and no GPU activity at all: CUPTI's records lost."""
    events: list[dict[str, Any]] = [_x("user_annotation", "ProfilerStep#0", 1_000.0, 40_000.0)]
    for i in range(launches):
        _launch(events, 1_010.0 + i * 100.0, i + 1, 50.0, gpu=False)
    return trace(events)


def gpu_only(kernels: int = 40) -> dict[str, Any]:
    """Kernels and nothing on the host: recorded with activities=[CUDA] and no runtime rows."""
    return trace(
        [
            _kernel("ampere_sgemm_128x64_nn", 1_000.0 + i * 100.0, 80.0, i + 1)
            for i in range(kernels)
        ]
    )


def gpu_lagging_steps(steps: int = 4) -> dict[str, Any]:
    """The host launches each step's work in 2 ms and runs ahead; the GPU takes 10 ms a
    step. ProfilerStep copies on the GPU timeline (gpu_user_annotation) show the GPU's step."""
    events: list[dict[str, Any]] = []
    corr = 1
    gpu_t = 1_100.0
    for s in range(steps):
        start = 1_000.0 + s * 2_000.0
        events.append(_x("user_annotation", f"ProfilerStep#{s}", start, 1_999.0))
        first = gpu_t
        for k in range(10):
            t = start + 10.0 + k * 150.0
            events.append(_x("cpu_op", "aten::mm", t, 20.0, **{"External id": corr}))
            events.append(
                _x(
                    "cuda_runtime",
                    "cudaLaunchKernel",
                    t + 5.0,
                    8.0,
                    correlation=corr,
                    **{"External id": corr},
                )
            )
            events.append(_kernel("ampere_sgemm_128x64_nn", gpu_t, 990.0, corr))
            gpu_t += 1_000.0
            corr += 1
        events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 0,
                "tid": 7,
                "ts": first,
                "dur": gpu_t - first - 10.0,
                "args": {"device": 0, "stream": 7},
            }
        )
    return trace(events)


def inference_decode(steps: int = 5) -> dict[str, Any]:
    """An HF generate decode loop: forward-only ops under no_grad, a KV-cache update per
    layer, no backward and no optimizer; the GPU idles between tiny decode kernels."""
    events: list[dict[str, Any]] = [
        _x("python_function", "transformers/generation/utils.py(2000): generate", 900.0, 60_000.0),
        _x("python_function", "torch/autograd/grad_mode.py(184): __init__", 950.0, 2.0),
    ]
    corr = 1
    for s in range(steps):
        start = 1_000.0 + s * 10_000.0
        events.append(_x("user_annotation", f"ProfilerStep#{s}", start, 9_999.0))
        for k in range(30):
            t = start + 10.0 + k * 300.0
            events.append(
                _x("python_function", "transformers/cache_utils.py(398): update", t - 5.0, 3.0)
            )
            _launch(events, t, corr, 6.0)
            corr += 1
    return trace(events)
