"""FLOPs, achieved FLOP/s and MFU of a small hand-written trace (analyze/flop_rate.py via
summarize_trace), the peak table (analyze/device_peaks.py) and the CPU estimate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.device_peaks import cpu_peak, find_peak, memory_bandwidth_tbps
from perfdoctor.analyze.trace import load_trace

from .gemm_trace import FP8, MM, gemm_trace


def summarize(tmp_path: Path, trace: dict[str, Any]) -> Any:
    import json

    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    compute = load_trace(path).compute
    assert compute is not None
    return compute


BF16_MM = ("aten::mm", [[1024, 2048], [2048, 4096]], ["c10::BFloat16"] * 2, MM, 100.0)


def test_per_op_rate_step_rate_and_mfu_with_its_denominator(tmp_path: Path) -> None:
    compute = summarize(tmp_path, gemm_trace([BF16_MM, BF16_MM]))
    flops = compute.flops
    one = 2 * 1024 * 2048 * 4096
    assert flops.flops == 2 * one and flops.flops_per_step == 2 * one
    (op,) = flops.ops
    assert op.count == 2 and op.precision == "bf16"
    # FLOPs over the op's own kernel time (the elementwise kernel after it is not its).
    assert op.tflops == pytest.approx(2 * one / 200.0 / 1e6)
    assert op.intensity == pytest.approx(one / ((1024 * 2048 + 2048 * 4096 + 1024 * 4096) * 2))
    assert flops.tflops == pytest.approx(2 * one / 10_000.0 / 1e6)
    use = compute.utilization
    assert use.mfu == pytest.approx(flops.tflops / 989.5)
    assert use.peak_text == "989.5 TFLOP/s dense bf16, H100 SXM"
    mix = compute.mix
    assert mix.lowp_frac == 1.0 and mix.dominant == "bf16 on matrix cores"
    assert mix.matmul_frac == pytest.approx(200.0 / 210.0)


def test_mixed_precisions_weigh_each_by_its_own_peak(tmp_path: Path) -> None:
    fp8 = (
        "aten::_scaled_mm",
        [[1024, 2048], [2048, 4096], [], []],
        ["c10::Float8_e4m3fn"] * 2,
        FP8,
        50.0,
    )
    compute = summarize(tmp_path, gemm_trace([BF16_MM, fp8]))
    one = 2 * 1024 * 2048 * 4096
    assert compute.flops.flops_by_precision == {"bf16": one, "fp8": one}
    at_peak_s = one / 989.5e12 + one / 1978.5e12
    assert compute.utilization.mfu == pytest.approx(at_peak_s / 10_000e-6)
    assert "FLOP-weighted" in compute.utilization.peak_text
    assert compute.mix.by_class == {
        "bf16 on matrix cores": pytest.approx(100 / 150),
        "fp8 on matrix cores": pytest.approx(50 / 150),
    }


def test_unknown_device_gives_the_rate_and_says_why_there_is_no_mfu(tmp_path: Path) -> None:
    odd = {"id": 0, "name": "Imaginary GPU 9000"}
    compute = summarize(tmp_path, gemm_trace([BF16_MM], device=odd))
    assert compute.flops.tflops is not None and compute.utilization.mfu is None
    assert "Imaginary GPU 9000" in compute.utilization.missing
    nameless = summarize(tmp_path, gemm_trace([BF16_MM], device=None))
    assert "deviceProperties" in nameless.utilization.missing


def test_causal_attention_is_halved_and_said_so(tmp_path: Path) -> None:
    attn = (
        "aten::_scaled_dot_product_flash_attention",
        [[2, 8, 512, 64]] * 3 + [[], []],
        ["c10::BFloat16"] * 3 + ["Scalar"] * 2,
        "void pytorch_flash::flash_fwd_kernel<cutlass::bfloat16_t>",
        80.0,
    )
    trace = gemm_trace([attn])
    trace["traceEvents"][1]["args"]["Concrete Inputs"] = ["", "", "", "0.", "True"]
    compute = summarize(tmp_path, trace)
    assert compute.flops.flops == 4 * 2 * 8 * 512 * 512 * 64 / 2
    assert compute.flops.assumptions == ("causal attention: half the score matrix counted",)


def test_an_op_wrapping_another_is_counted_once(tmp_path: Path) -> None:
    """aten::linear holds aten::addmm: the innermost op is counted, not both."""
    trace = gemm_trace(
        [
            (
                "aten::addmm",
                [[4096], [1024, 2048], [2048, 4096], [], []],
                ["c10::BFloat16"] * 3,
                MM,
                100.0,
            )
        ]
    )
    outer = dict(trace["traceEvents"][1], name="aten::linear", ts=90.0, dur=60.0)
    outer["args"] = {
        "Input Dims": [[1024, 2048], [4096, 2048], [4096]],
        "Input type": ["c10::BFloat16"] * 3,
    }
    trace["traceEvents"].insert(1, outer)
    compute = summarize(tmp_path, trace)
    assert (
        compute.flops.flops == 2 * 1024 * 2048 * 4096 and compute.flops.ops[0].op == "aten::addmm"
    )


@pytest.mark.parametrize(
    ("name", "part", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
        ("NVIDIA A10", "A10", 125.0),
        ("NVIDIA L40S", "L40S", 362.05),
        ("NVIDIA L4", "L4", 121.0),
        ("NVIDIA H200", "H200 SXM", 989.5),
        ("NVIDIA H800", "H800 SXM", 989.5),
        ("NVIDIA B200", "B200", 2250.0),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2),
        ("AMD Instinct MI300X", "MI300X", 1307.4),
        ("AMD Instinct MI325X", "MI325X", 1307.4),
        ("AMD Instinct MI355X", "MI355X", 2516.6),
        ("AMD Instinct MI250X", "MI250X (one GCD)", 191.5),
    ],
)
def test_peak_table_is_dense(name: str, part: str, bf16: float) -> None:
    peak = find_peak(name)
    assert peak is not None and peak.name == part and peak.peak("bf16") == bf16
    assert peak.source


def test_peak_table_edges() -> None:
    v100 = find_peak("Tesla V100-SXM2-32GB")
    assert v100 is not None and v100.peak("fp16") == 125.0 and v100.peak("bf16") is None
    t4 = find_peak("Tesla T4")
    assert t4 is not None and t4.peak("tf32") is None
    # An MI250 GCD that calls itself "AMD Radeon Graphics": gfx90a and its CU count decide.
    gcd = find_peak("AMD Radeon Graphics", gfx=(9, 0), compute_units=104)
    assert gcd is not None and gcd.peak("fp32", matrix_cores=True) == 45.3
    assert find_peak("AMD Radeon Graphics") is None and find_peak(None) is None


def test_memory_bandwidth_for_the_roofline() -> None:
    a100 = find_peak("NVIDIA A100-SXM4-80GB")
    assert a100 is not None
    assert memory_bandwidth_tbps(a100, "NVIDIA A100-SXM4-80GB") == 2.039
    assert memory_bandwidth_tbps(a100, "NVIDIA A100-PG509-200") == 1.555
    mi300 = find_peak("AMD Instinct MI300X")
    assert mi300 is not None and memory_bandwidth_tbps(mi300) == 5.3


def test_cpu_peak_is_an_estimate_from_cores_clock_and_isa() -> None:
    peak = cpu_peak({"cores": 4, "mhz": 2500.0, "flags": "avx2 fma"})
    assert peak is not None and peak.estimate
    assert peak.peak("fp32") == pytest.approx(4 * 2.5 * 8 * 2 * 2 / 1000)
    assert "estimate" in peak.source and "AVX2" in peak.source
    assert cpu_peak({"cores": 4, "mhz": None}) is None


def test_a_strided_forward_conv_takes_its_output_from_its_backward(tmp_path: Path) -> None:
    """The trace leaves stride out; the backward's gradient has the forward's output shape."""
    x, w, grad = [32, 3, 32, 32], [16, 3, 3, 3], [32, 16, 16, 16]  # stride 2
    conv = "sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw"
    ops = [
        ("aten::cudnn_convolution", [x, w], ["float"] * 2, conv, 50.0),
        ("aten::convolution_backward", [grad, x, w], ["float"] * 3, conv, 100.0),
    ]
    flops = summarize(tmp_path, gemm_trace(ops)).flops
    forward = 2 * 32 * 16 * 16 * 16 * 3 * 9
    assert flops.flops == forward + 2 * forward
    assert flops.flops_by_precision == {"tf32": 3 * forward}
    assert "stride 1" not in " ".join(flops.assumptions)


A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}


def test_a_gpu_trace_without_kernels_has_no_mfu_and_says_why(tmp_path: Path) -> None:
    """An A100 inference trace whose GPU side was not recorded: the ops' CPU time is launch
    time, so neither an MFU (it said 44% of 19.5 TFLOP/s) nor per-op rates (an aten::mm at
    1,273 TFLOP/s) are measured."""
    fp32_mm = ("aten::mm", [[4096, 4096], [4096, 4096]], ["float"] * 2, MM, 100.0)
    trace = gemm_trace([fp32_mm] * 4, device=A100)
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e["cat"] not in ("kernel", "cuda_runtime")
    ]
    compute = summarize(tmp_path, trace)
    assert compute.flops is not None and compute.flops.flops == 4 * 2 * 4096**3
    assert all(op.time_us is None and op.tflops is None for op in compute.flops.ops)
    assert "no GPU kernels" in compute.flops.op_time_basis
    use = compute.utilization
    assert use is not None and use.mfu is None
    assert "no GPU kernels" in use.missing


def test_the_report_of_a_kernelless_gpu_trace_prints_why_not_an_mfu(tmp_path: Path) -> None:
    import json

    from perfdoctor.diagnose_traces import diagnose_traces
    from perfdoctor.render.markdown import render_markdown

    fp32_mm = ("aten::mm", [[4096, 4096], [4096, 4096]], ["float"] * 2, MM, 100.0)
    trace = gemm_trace([fp32_mm] * 4, device=A100)
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e["cat"] not in ("kernel", "cuda_runtime")
    ]
    path = tmp_path / "infer.pt.trace.json"
    path.write_text(json.dumps(trace))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    assert done.report.facts.get("mfu_frac") is None
    text = str(render_markdown(done.report))
    assert "no GPU kernels" in text
    assert re.search(r"MFU \d", text) is None
    (row,) = [line for line in text.splitlines() if line.startswith("| aten::mm")]
    assert row.split("|")[5].strip() == "\\-"  # no per-op rate
    assert "achieved" not in text
