from __future__ import annotations

import pytest

from perfdoctor.analyze.kernels import (
    is_comm_kernel,
    is_launch_call,
    is_tensor_core_kernel,
    is_triton_kernel,
)


@pytest.mark.parametrize(
    "name",
    [
        "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN",  # Hopper cuBLASLt, missed by tb-profiler
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1",
        "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8",
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)",
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_32x6_tn",
        "volta_h884gemm_64x64_ldg8_nn",
        "turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >",
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel)",
        "sm90_gmma_wgmma_kernel",
        "triton_tem_fused_addmm_0",
    ],
)
def test_tensor_core_kernels(name: str) -> None:
    assert is_tensor_core_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "ampere_sgemm_128x64_tn",  # fp32 SIMT GEMM
        "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >",
        "triton_poi_fused_mm_relu_0",  # pointwise Triton: conservative, never counted
        "triton_red_fused_native_layer_norm_0",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(ReduceOp)",
        "kernel_116880_copy",  # 1688 only as part of a bigger number
    ],
)
def test_not_tensor_core_kernels(name: str) -> None:
    assert not is_tensor_core_kernel(name)


def test_triton_comm_and_launch_names() -> None:
    assert is_triton_kernel("triton_per_fused_sum_1")
    assert not is_triton_kernel("nvjet_tst_64x8")
    assert is_comm_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage)")
    assert is_comm_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)")
    assert not is_comm_kernel("ampere_sgemm_128x64_tn")
    assert is_launch_call("cudaLaunchKernel") and is_launch_call("cuLaunchKernelEx")
    assert is_launch_call("cudaGraphLaunch") and not is_launch_call("cudaMemcpyAsync")
