"""Precision and MFU on modern serving traces from AMD-AGI/TraceLens (tests/traces, MIT, at
171dd747), kept outside the repository: $PERFDOCTOR_EXTRA_CORPUS or ../extra-corpus beside
the checkout, as `tracelens_<path with / as _>`; skipped when absent.

* b200/eager_trace.json.gz: vLLM on a B200: TRT-LLM MX block-scaled (MXFP4 x MXFP8) MoE
  GEMMs, bf16 x MXFP4 GEMMs, fp8 attention, multimem all-reduce;
* inference/vllm_prefilldecode_piecewise/graph_execution.json.gz: gpt-oss on ROCm, MXFP4 MoE
  weights through triton_kernels' bf16 matmul_ogs, hipBLASLt bf16;
* inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz: SGLang Qwen3-8B on
  an MI300X, hipBLASLt bf16 and CK paged-KV attention.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdoctor.analyze.trace import TraceSummary, load_trace
from perfdoctor.diagnose_traces import diagnose_traces

from .gpu_corpus import REPO

B200 = "tracelens_b200_eager_trace.json.gz"
GPT_OSS = "tracelens_inference_vllm_prefilldecode_piecewise_graph_execution.json.gz"
SGLANG = "tracelens_inference_sglang_prefilldecode_sglang_Qwen3-8B_prefilldecode.json.gz"
PRECISION_FIXES = {"amp-bf16", "amp-fp16", "tf32"}


def extra(name: str) -> Path:
    env = os.environ.get("PERFDOCTOR_EXTRA_CORPUS")
    root = Path(env) if env else REPO.parent / "extra-corpus"
    if not (root / name).is_file():
        pytest.skip(f"{name} absent (set PERFDOCTOR_EXTRA_CORPUS)")
    return root / name


def summary(name: str) -> TraceSummary:
    return load_trace(extra(name))


def test_b200_mx_moe_is_low_precision_and_its_mfu_a_lower_bound() -> None:
    compute = summary(B200).compute
    assert compute is not None and compute.mix is not None and compute.flops is not None
    assert compute.mix.lowp_frac is not None and compute.mix.lowp_frac > 0.99
    assert compute.mix.dominant == "mx on matrix cores"
    assert compute.mix.by_class["fp8 on matrix cores"] > 0.02  # the fp8 attention
    # The MoE GEMMs are custom ops with no aten shapes: most GEMM time is not counted.
    assert compute.flops.coverage is not None and compute.flops.coverage < 0.5
    assert compute.peak is not None and compute.peak.name == "B200"


@pytest.mark.parametrize("name", [GPT_OSS, SGLANG])
def test_rocm_serving_traces_compute_in_bf16(name: str) -> None:
    compute = summary(name).compute
    assert compute is not None and compute.mix is not None
    assert compute.mix.dominant == "bf16 on matrix cores"
    assert compute.mix.lowp_frac is not None and compute.mix.lowp_frac > 0.95


def test_sglang_mi300x_mfu() -> None:
    compute = summary(SGLANG).compute
    assert compute is not None and compute.utilization is not None
    assert compute.utilization.peak_text == "1,307 TFLOP/s dense bf16, MI300X"
    assert compute.utilization.mfu is not None and 0.05 < compute.utilization.mfu < 1


@pytest.mark.parametrize("name", [B200, GPT_OSS, SGLANG])
def test_no_autocast_or_tf32_advice(name: str, tmp_path: Path) -> None:
    (diagnosis,) = diagnose_traces([extra(name)], tmp_path)
    assert diagnosis.report is not None
    offered = {o for f in diagnosis.report.findings for o in f.optimizations}
    assert not offered & PRECISION_FIXES, offered
