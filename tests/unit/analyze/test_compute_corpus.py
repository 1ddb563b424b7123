"""Precision, FLOPs and MFU on real traces of the shared GPU corpus (skipped without it):
hipBLASLt bf16 on an MI300X, Hugging Face bf16 inference on an H100, fp32 MFMA on an MI250
GCD, fp32 SIMT GEMMs on DLRM's V100 ranks; none of the low-precision ones is told to turn on
autocast or TF32."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.diagnose_traces import diagnose_traces

from .gpu_corpus import corpus_dir, trace_summary

MI300 = "tracelens_mi300_torch_compile_triton_trace.json.gz"
H100 = "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"
MI250 = "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
DLRM0 = "param_dlrm_worker0_step_12.1694128201545.pt.trace.json.gz"
PRECISION_FIXES = {"amp-bf16", "amp-fp16", "tf32"}


def corpus(name: str) -> Path:
    root = corpus_dir()
    if root is None or not (root / "traces" / name).is_file():
        pytest.skip("GPU corpus absent (set PERFDOCTOR_GPU_CORPUS)")
    return root / "traces" / name


def test_mi300x_hipblaslt_bf16_runs_on_matrix_cores() -> None:
    summary = trace_summary(corpus(MI300))
    assert summary.gpu is not None and summary.gpu.tensor_core_kernel_frac is not None
    # Cijk_..._BBS_..._MI16x16x1 GEMMs by name alone (before: "0% tensor cores"), and with
    # the op's bf16 dtype the Triton attention kernel (attn_fwd) too.
    assert summary.gpu.tensor_core_kernel_frac > 0.6
    compute = summary.compute
    assert compute is not None and compute.mix is not None
    assert compute.mix.matrix_frac > 0.9
    assert compute.mix.dominant == "bf16 on matrix cores" and compute.mix.lowp_frac == 1.0
    use = compute.utilization
    assert use is not None and use.peak_text == "1,307 TFLOP/s dense bf16, MI300X"
    assert use.mfu is not None and 0.05 < use.mfu < 1.0


def test_h100_bf16_inference_mfu_and_causal_attention() -> None:
    compute = trace_summary(corpus(H100)).compute
    assert compute is not None and compute.mix is not None and compute.flops is not None
    assert compute.mix.dominant == "bf16 on matrix cores" and compute.mix.lowp_frac > 0.99
    assert "causal attention: half the score matrix counted" in compute.flops.assumptions
    assert compute.flops.uncounted_ops == 0
    use = compute.utilization
    assert use is not None and use.peak_text == "989.5 TFLOP/s dense bf16, H100 SXM"
    assert use.mfu is not None and 0.01 < use.mfu < 1.0
    # Every op's achieved rate stays under the dense peak (no MFU above 100% on attention).
    assert all(op.tflops is None or op.tflops < 989.5 for op in compute.flops.ops)


def test_mi250_gcd_fp32_on_matrix_cores_and_v100_fp32_simt() -> None:
    mi250 = trace_summary(corpus(MI250)).compute
    assert mi250 is not None and mi250.mix is not None and mi250.peak is not None
    assert mi250.mix.dominant == "fp32 on matrix cores"
    assert mi250.peak.name == "MI210 / MI250 (one GCD)"
    dlrm = trace_summary(corpus(DLRM0)).compute
    assert dlrm is not None and dlrm.mix is not None and dlrm.utilization is not None
    assert dlrm.mix.dominant == "fp32 SIMT" and dlrm.mix.lowp_frac == 0.0
    assert dlrm.utilization.peak_text == "15.7 TFLOP/s dense fp32, V100 SXM2"


@pytest.mark.parametrize("name", [MI300, H100])
def test_low_precision_traces_get_no_autocast_or_tf32_advice(name: str, tmp_path: Path) -> None:
    (diagnosis,) = diagnose_traces([corpus(name)], tmp_path)
    report = diagnosis.report
    assert report is not None
    offered = {o for f in report.findings for o in f.optimizations}
    offered |= {r.optimization_id for r in report.recommendations}
    assert not offered & PRECISION_FIXES, offered
    assert report.facts["mfu_frac"] is not None and "dense bf16" in str(report.facts["mfu_peak"])
