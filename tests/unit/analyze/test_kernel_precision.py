# ruff: noqa: E501  (kernel names are as long as the libraries make them)
"""Kernel names -> the precision they compute in, NVIDIA and AMD (analyze/kernel_precision.py).

Names are as the libraries emit them (cuBLAS/cuBLASLt, CUTLASS, DeepGEMM, cuDNN,
FlashAttention, Triton; Tensile/hipBLASLt, CK); several are from the shared GPU corpus."""

from __future__ import annotations

import pytest

from perfdoctor.analyze.kernel_precision import (
    ATTENTION,
    CONV,
    GEMM,
    classify_kernel,
    dtype_precision,
)

CASES = [
    # NVIDIA cuBLAS / cuBLASLt
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", None, GEMM, "bf16", True),
    ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", None, GEMM, "fp8", True),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1", None, GEMM, "tf32", True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4", None, GEMM, "fp32", False),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", None, GEMM, "bf16", True),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_nn", None, GEMM, "fp16", True),
    ("ampere_tf32_s1688gemm_tf32_128x128_32x4_nn", None, GEMM, "tf32", True),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", None, GEMM, "fp16", True),
    ("volta_h884gemm_64x64_ldg8_nn", None, GEMM, "fp16", True),
    ("volta_sgemm_128x32_nt", None, GEMM, "fp32", False),
    ("ampere_sgemm_128x64_tn", None, GEMM, "fp32", False),
    ("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN", "c10::BFloat16", GEMM, "bf16", True),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false>", None, GEMM, "fp32", False),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, float, float, 128, 16, 4, 4>", None, GEMM, "bf16", False),
    # CUTLASS, DeepGEMM, MX / block-scaled
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8", None, GEMM, "bf16", True),
    ("cutlass3x_sm90_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn_align16", None, GEMM, "fp8", True),
    ("cutlass_80_simt_sgemm_128x128_8x4_nn_align1", None, GEMM, "fp32", False),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(Params)", None, GEMM, "tf32", True),
    ("void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u, 1u>(float*, int*, int)", None, GEMM, "fp8", True),
    ("cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<mxf8f6f4_blockscaled>>", None, GEMM, "mx", True),
    ("sm100_gemm_e2m1_e2m1_bf16_nvf4_blockscaled", None, GEMM, "fp4", True),
    # TRT-LLM on a B200 (vLLM gpt-oss, TraceLens tests/traces/b200): MX block-scaled GEMMs,
    # bf16 activations times MXFP4 weights, fp8 attention
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN", None, GEMM, "mx", True),
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM", None, GEMM, "bf16", True),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", None, ATTENTION, "fp8", True),
    # triton_kernels MXFP4 MoE on an MI300X (bf16 compute) and ROCm paged attention
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", None, GEMM, "bf16", True),
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, 1, 128>", None, ATTENTION, "bf16", True),
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1", None, GEMM, "bf16", True),
    # cuDNN
    ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32", None, CONV, "bf16", True),
    ("sm86_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw", None, CONV, "tf32", True),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1>(int)", None, CONV, "fp32", False),
    ("volta_scudnn_128x64_relu_interior_nn_v1", None, CONV, "fp32", False),
    # attention
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>", None, ATTENTION, "bf16", True),
    ("void flash::FlashAttnFwdSm90<cutlass::float_e4m3_t>", None, ATTENTION, "fp8", True),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", None, ATTENTION, "fp16", True),
    # Triton: the name gives the family, the op its dtype
    ("triton_tem_fused_mm_0", "c10::BFloat16", GEMM, "bf16", True),
    ("attn_fwd", "c10::BFloat16", ATTENTION, "bf16", True),
    # AMD Tensile / hipBLASLt (MI = MFMA matrix cores) and CK
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1_AFC1", None, GEMM, "bf16", True),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8_SN", None, GEMM, "fp16", True),
    ("Cijk_Ailk_Bljk_F8B8BS_BH_MT128x128x64_MI32x32x16", None, GEMM, "fp8", True),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", None, GEMM, "fp32", True),
    ("Cijk_Ailk_Bljk_SB_MT64x64x8_SN", None, GEMM, "fp32", False),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::tensor_operation::device::DeviceGemm_Xdl<ck::bhalf_t>>", None, GEMM, "bf16", True),
]  # fmt: skip


@pytest.mark.parametrize(("name", "dtype", "family", "precision", "matrix"), CASES)
def test_kernel_names_give_precision_and_units(
    name: str, dtype: str | None, family: str, precision: str, matrix: bool
) -> None:
    found = classify_kernel(name, dtype)
    assert (found.family, found.precision, found.matrix_cores) == (family, precision, matrix)


@pytest.mark.parametrize(
    "name",
    [
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16>>",
        "triton_poi_fused_mm_add_0",  # a pointwise kernel naming the mm it follows
        "triton_red_fused_native_layer_norm_0",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<float>",
        "kernel_116880_copy",  # an MMA shape only inside a bigger number
        "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16>",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>",
        "flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024>",
    ],
)
def test_other_kernels_are_not_classified(name: str) -> None:
    assert classify_kernel(name).family is None


def test_an_unknown_gemm_is_unknown_not_fp32_or_simt() -> None:
    """A user Triton matmul without an op dtype: its family is known, its precision is not,
    and it is never counted as 'not on tensor cores'."""
    found = classify_kernel("my_triton_matmul_kernel")
    assert found.family == GEMM and found.precision == "unknown"
    assert found.matrix_cores is None and found.label == "unknown precision"


def test_op_dtypes() -> None:
    assert dtype_precision("c10::BFloat16") == "bf16"
    assert dtype_precision("c10::Half") == "fp16"
    assert dtype_precision("c10::Float8_e4m3fn") == "fp8"
    assert dtype_precision("float") == "fp32"
    assert dtype_precision("long int") == "unknown" and dtype_precision(None) == "unknown"
