"""fp32 matmul/conv on a tensor-core GPU, from a trace (issue 32): an RTX 2080 Ti and a V100
ResNet trace, 2/3 of the kernel time fp32 convolutions at about half busy, got no precision
advice (only the GPU-bound rule, above 85% busy, gave it). The rule fires on the kernels'
own precision, and its gain never passes the GPU's busy share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report

from .gemm_trace import gemm_trace

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}
RTX = {"id": 0, "name": "NVIDIA GeForce RTX 2080 Ti", "computeMajor": 7, "computeMinor": 5}
FP32_CONV = "volta_scudnn_128x64_relu_interior_nn_v1"
FP16_CONV = "volta_fp16_s884cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1"
X, W = [32, 64, 56, 56], [64, 64, 3, 3]


def _report(tmp_path: Path, device: dict, conv_kernel: str, dtype: str) -> Report:
    conv = ("aten::cudnn_convolution", [X, W], [dtype] * 2, conv_kernel, 300.0)
    relu = ("aten::relu_", [X], [dtype], "elementwise_kernel", 150.0)
    trace = gemm_trace([conv, relu] * 6, device=device, step_us=5000.0)
    path = tmp_path / "resnet.pt.trace.json"
    path.write_text(json.dumps(trace))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    return done.report


@pytest.mark.parametrize("device", [V100, RTX], ids=["v100", "rtx2080ti"])
def test_fp32_convolutions_at_half_busy_get_mixed_precision(tmp_path: Path, device: dict) -> None:
    report = _report(tmp_path, device, FP32_CONV, "float")
    busy = report.facts["gpu_busy_frac"]
    share = report.facts["fp32_matmul_conv_frac"]
    assert 0.4 < busy < 0.85 and 0.6 < share < 0.7
    (finding,) = [f for f in report.findings if f.rule_id == "fp32-on-tensor-cores"]
    assert "amp-fp16" in finding.optimizations  # neither bf16 nor TF32 before Ampere
    gain = finding.gain.step_time_frac
    assert gain is not None and gain <= busy * share
    assert gain < busy


def test_convolutions_already_in_fp16_get_no_precision_advice(tmp_path: Path) -> None:
    report = _report(tmp_path, V100, FP16_CONV, "c10::Half")
    assert not [f for f in report.findings if f.rule_id == "fp32-on-tensor-cores"]
