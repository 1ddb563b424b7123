"""Convolution FLOPs on 2021-era traces (issue 32): a V100 ResNet-50 trace's strided
forward convolutions counted ~4x high, its backward convolutions under their old op names
not counted at all, and per-op rates above the V100's 15.7 TFLOP/s roof printed and drawn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.op_flops import op_flops
from perfdoctor.analyze.trace import load_trace
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import compute_section

from .gemm_trace import gemm_trace

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}
# cuDNN's fp32 convolution kernels on Volta (no tensor cores in fp32).
FPROP = "volta_scudnn_128x64_relu_interior_nn_v1"
DGRAD = "volta_scudnn_128x128_stridedB_splitK_small_nn_v1"
# ResNet-50's stem: 224x224 in, 7x7 stride 2 padding 3: 112x112 out.
X, W, GRAD = [32, 3, 224, 224], [64, 3, 7, 7], [32, 64, 112, 112]
STEM = 2.0 * 32 * 112 * 112 * 64 * 3 * 49


def _old_style(trace: dict[str, Any]) -> dict[str, Any]:
    """The categories torch 1.8-1.9 wrote (Operator, Kernel, Runtime)."""
    rename = {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime"}
    for e in trace["traceEvents"]:
        e["cat"] = rename.get(e["cat"], e["cat"])
    return trace


def _load(tmp_path: Path, trace: dict[str, Any]) -> Any:
    path = tmp_path / "resnet50.pt.trace.json"
    path.write_text(json.dumps(trace))
    return load_trace(path).compute


@pytest.mark.parametrize(
    ("name", "dims"),
    [
        ("aten::cudnn_convolution_backward", [X, GRAD, W]),
        ("aten::mkldnn_convolution_backward", [X, GRAD, W]),
        ("aten::miopen_convolution_backward", [X, GRAD, W]),
        ("aten::thnn_conv2d_backward", [GRAD, X, W]),
        ("aten::convolution_backward", [GRAD, X, W]),
        ("CudnnConvolutionBackward", [GRAD, X, W]),
        ("aten::_convolution_double_backward", [X, W, [64], GRAD, W, X]),
    ],
)
def test_backward_convolutions_under_every_name_are_twice_the_forward(
    name: str, dims: list[Any]
) -> None:
    counted = op_flops(name, ["float"] * len(dims), dims)
    assert counted is not None and counted.flops == 2 * STEM


def test_a_forward_takes_stride_padding_dilation_from_its_concrete_args() -> None:
    """torch >= 2.1: `Concrete Inputs` carries the int lists."""
    concrete = ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]
    counted = op_flops("aten::convolution", ["float"] * 2, [X, W], concrete)
    assert counted is not None and counted.flops == STEM and counted.assumption is None
    # cudnn_convolution's own order (self, weight, padding, stride, dilation, ...)
    cudnn = ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]
    assert op_flops("aten::cudnn_convolution", ["float"] * 2, [X, W], cudnn).flops == STEM
    dilated = ["", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "1"]
    k3 = [64, 3, 3, 3]  # 3x3 dilation 2 padding 2 keeps 224
    assert op_flops("aten::convolution", ["float"] * 2, [X, k3], dilated).flops == (
        2.0 * 32 * 224 * 224 * 64 * 27
    )


def test_a_2021_resnet_step_counts_strided_forwards_and_old_backwards(tmp_path: Path) -> None:
    ops = [
        ("aten::cudnn_convolution", [X, W, [], [], [], [], [], []], ["float"] * 2, FPROP, 400.0),
        ("aten::cudnn_convolution_backward", [X, GRAD, W, [], [], []], ["float"] * 3, DGRAD,
         800.0),
    ]  # fmt: skip
    compute = _load(tmp_path, _old_style(gemm_trace(ops, device=V100)))
    flops = compute.flops
    assert flops.flops == STEM + 2 * STEM  # forward at 112x112, backward twice that
    assert flops.uncounted_ops == 0
    assert not any("stride 1" in a for a in flops.assumptions)


def test_a_rate_above_the_v100_roof_is_withheld_and_said(tmp_path: Path) -> None:
    """An fp32 convolution whose FLOPs over its kernel time pass 15.7 TFLOP/s is a
    miscount: no rate printed, none drawn, the section says what is wrong."""
    ops = [
        # 22.7 GFLOP in 400 µs = 57 TFLOP/s: impossible in fp32 on a V100.
        ("aten::cudnn_convolution", [[256, 3, 224, 224], W], ["float"] * 2, FPROP, 400.0),
        ("aten::cudnn_convolution", [X, W], ["float"] * 2, FPROP, 4000.0),
    ]
    trace = _old_style(gemm_trace(ops, device=V100, step_us=20_000.0))
    compute = _load(tmp_path, trace)
    rates = {op.shapes.split(" ")[0]: op.tflops for op in compute.flops.ops}
    assert rates["256x3x224x224"] is None
    assert rates["32x3x224x224"] is not None and rates["32x3x224x224"] < 15.7
    (said,) = compute.flops.over_peak
    assert "15.7 TFLOP/s" in said and "miscounted" in said
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(trace))
    (done,) = diagnose_traces([path], tmp_path / "out")
    report = done.report
    section = compute_section.compute_section(report)
    assert any("miscounted" in n for n in section.notes)
    assert all(y <= 15.7 for _, y, _ in compute_section.roofline_points(report))
    # The step's FLOPs hold the miscount: no MFU (it read 87% at 22% busy), no rate.
    assert report.facts["mfu_frac"] is None and report.facts["achieved_tflops"] is None
    assert "above the device's peak" in report.facts["mfu_missing"]
