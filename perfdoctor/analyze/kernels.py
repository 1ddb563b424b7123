"""What a GPU kernel is, from its name: tensor-core GEMM/conv, Triton, communication.

Tensor cores. torch-tb-profiler's allowlist (NVIDIA PyProf era: h884, s1688, hmma, 16816,
xmma_gemm, ...) misses what Hopper and current libraries emit, and then reports "0% tensor
cores" on an H100 running bf16 GEMMs all day. Patterns recognised here:

* cuBLAS/cuBLASLt on Hopper: `nvjet_*` (e.g. nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN);
* cuBLAS/cuDNN "xmma" kernels: `sm90_xmma_gemm_*`, `sm80_xmma_*`, `xmma_implicit_gemm`, ...;
* Hopper warpgroup MMA: `gmma`, `wgmma`;
* CUTLASS: `*tensorop*` (cutlass_80_tensorop_s1688gemm_*, cutlass3x_sm90_tensorop_gemm_*);
* MMA instruction shapes in cuBLAS/cuDNN names: hmma, imma, 884 / 1688 / 16816 / 16832 /
  8816 (volta_h884gemm, turing_fp16_s1688gemm, ampere_bf16_s16816gemm, ...), matched only as
  whole numbers so that ids and template arguments do not match by accident;
* attention: flash (flash_fwd_kernel, pytorch_flash::), fmha (fmha_cutlassF_*, the
  memory-efficient kernels), cudnn SDPA (`sdpa`), which run on tensor cores on sm80+;
* torch-tb-profiler's cuDNN convolution names (dgrad_1x1_stride_2x2, conv1x1, ...).

Triton kernels are the uncertain case: whether `tl.dot` used tensor cores depends on dtypes
and TF32 settings that the name does not carry. So only Inductor *template* matmuls
(`triton_tem_*mm*`, generated from tl.dot GEMM templates) are counted; pointwise and
reduction kernels (`triton_poi_*`, `triton_red_*`, `triton_per_*`) never are, even when a
fused op name inside them happens to contain "mm". The share is therefore a lower bound
on Triton-heavy (torch.compile) runs; NVML GPM tensor activity is the ground truth on Hopper.
"""

from __future__ import annotations

import re

from perfdoctor.analyze import collectives

_TC_SUBSTRINGS = (
    "nvjet",
    "xmma",
    "gmma",  # also matches wgmma
    "tensorop",
    "hmma",
    "imma",
    "flash",
    "fmha",
    "sdpa",
    "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel",
    "conv1x1",
    "conv2d_c1_k1",
    "direct_group",
)
# MMA shapes as whole numbers: s1688gemm, h884, 16816 -- not 1688 inside 116880.
_TC_SHAPES = re.compile(r"(?<![0-9])(?:884|1688|16816|16832|8816)(?![0-9])")
_TRITON_TEMPLATE_MM = re.compile(r"^triton_tem_.*mm")


def is_tensor_core_kernel(name: str) -> bool:
    low = name.lower()
    if low.startswith("triton"):
        return _TRITON_TEMPLATE_MM.match(low) is not None
    return any(s in low for s in _TC_SUBSTRINGS) or _TC_SHAPES.search(low) is not None


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
