"""What a GPU kernel is, from its name: tensor/matrix-core GEMM/conv/attention, Triton,
communication.

Tensor cores: kernel_precision.py classifies GEMM, convolution and attention kernels by the
precision they compute in and whether they run on tensor cores (NVIDIA) or MFMA matrix cores
(AMD); torch-tb-profiler's allowlist (h884, s1688, hmma, xmma_gemm, ...) knows neither FP8, MX
block-scaled nor ROCm names, and then calls an FP8 or hipBLASLt bf16 run "0% tensor cores".
"""

from __future__ import annotations

from perfdoctor.analyze import collectives, kernel_precision


def is_tensor_core_kernel(name: str) -> bool:
    return kernel_precision.is_tensor_core_kernel(name)


def is_triton_kernel(name: str) -> bool:
    return name.startswith("triton")


def is_comm_kernel(name: str) -> bool:
    """NCCL/RCCL, DeepEP and other all-to-all, symmetric-memory kernels (collectives.py)."""
    return collectives.is_comm_kernel(name)


# Launch calls of CUDA (runtime, driver: cuLaunchKernel for Triton, graphs) and of ROCm's
# HIP (hipLaunchKernel, hipExtModuleLaunchKernel for Tensile GEMMs, hipModuleLaunchKernel
# for Triton, hipGraphLaunch).
_LAUNCH_PREFIXES = (
    "cudaLaunch",
    "cuLaunch",
    "cudaGraphLaunch",
    "hipLaunch",
    "hipExtLaunch",
    "hipModuleLaunch",
    "hipExtModuleLaunch",
    "hipHccModuleLaunch",
    "hipGraphLaunch",
)
# Runtime calls that block the host until the device is done. A plain cudaMemcpy /
# hipMemcpy blocks; the *Async variants do not. hipMemcpyWithStream is ROCm's blocking copy
# on a stream (what torch uses for a synchronous .to()/.item() on ROCm).
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipCtxSynchronize",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemcpyFromSymbol",
        "hipMemcpyWithStream",
        "hipMemcpyDtoH",
    }
)
_COPY_PREFIXES = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy", "hipMemset")
_MEMCPY_PREFIXES = ("cudaMemcpy", "cuMemcpy", "hipMemcpy")


def is_launch_call(name: str) -> bool:
    """Runtime/driver calls that put a kernel on a stream (cudaLaunchKernel, cuLaunchKernel
    for Triton, cudaLaunchKernelExC, cooperative launches, CUDA graph launches, and the
    hip* equivalents on ROCm)."""
    return name.startswith(_LAUNCH_PREFIXES)


def is_sync_call(name: str) -> bool:
    """Runtime calls that wait for the device (stream/device/event syncs, blocking copies)."""
    return name in SYNC_CALLS


def is_copy_call(name: str) -> bool:
    """Runtime calls that put a copy or a memset on a stream (CUDA and HIP)."""
    return name.startswith(_COPY_PREFIXES)


def is_memcpy_call(name: str) -> bool:
    """Runtime calls that copy memory, blocking or not (CUDA and HIP)."""
    return name.startswith(_MEMCPY_PREFIXES)
