"""The compute section (render/compute_section.py) in every renderer, from a hand-written
H100 trace diagnosed end to end: MFU with its denominator, the ops, the HTML roofline."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import report_from_dict, report_to_dict
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.terminal import make_console, render_terminal
from tests.unit.analyze.gemm_trace import MM, gemm_trace


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    root = tmp_path_factory.mktemp("compute")
    ops = [("aten::mm", [[1024, 2048], [2048, 4096]], ["c10::BFloat16"] * 2, MM, 100.0)] * 2
    path = root / "h100.pt.trace.json"
    path.write_text(json.dumps(gemm_trace(ops)))
    (diagnosis,) = diagnose_traces([path], root / "out")
    assert diagnosis.report is not None
    return diagnosis.report


def test_facts_and_report_data(report: Report) -> None:
    # 2 x 2*1024*2048*4096 FLOPs in a 10 ms step: 3.44 TFLOP/s, 0.35% of 989.5.
    assert report.facts["flops_per_step"] == 2 * 2 * 1024 * 2048 * 4096
    assert report.facts["mfu_peak"] == "989.5 TFLOP/s dense bf16, H100 SXM"
    assert report.compute["trace"]["ops"][0]["precision"] == "bf16"
    assert report.compute["peak"]["memory_tbps"] == 3.35  # the roofline's slope
    assert report_from_dict(report_to_dict(report)).compute == report.compute


def test_every_renderer_prints_the_ratio_beside_its_denominator(report: Report) -> None:
    mfu = report.facts["mfu_frac"]
    assert isinstance(mfu, float)
    headline = f"MFU {mfu * 100:.2f}"[:-1]  # the renderers round; the prefix is enough
    md = render_markdown(report)
    assert "## Compute: FLOPs, MFU and precision" in md
    assert "989.5 TFLOP/s dense bf16, H100 SXM" in md and headline in md
    assert "| aten::mm | 1024x2048 2048x4096 | bf16 | 2 |" in md
    html = render_html(report)
    assert "989.5 TFLOP/s dense bf16, H100 SXM" in html
    assert "Roofline of the ops</h3><svg" in html
    # Tick labels are plain numbers: the SVG keeps text as text, so mathtext would show raw.
    assert "mathdefault" not in html
    out = io.StringIO()
    render_terminal(report, make_console(out))
    assert "989.5 TFLOP/s dense bf16, H100 SXM" in out.getvalue()


def test_no_section_without_flops(tmp_path: Path) -> None:
    trace = gemm_trace([])
    path = tmp_path / "empty.pt.trace.json"
    path.write_text(json.dumps(trace))
    (diagnosis,) = diagnose_traces([path], tmp_path / "out")
    if diagnosis.report is not None:
        assert "Compute: FLOPs" not in render_markdown(diagnosis.report)


def test_an_ops_flop_per_byte_below_one_is_not_printed_as_zero() -> None:
    from perfdoctor.render.compute_section import _op_row

    # A 32x4 @ 4x32 matmul: ~0.9 FLOP per byte of least traffic.
    small = _op_row({"op": "aten::mm", "flops": 8192.0, "intensity": 0.914}, None)
    large = _op_row({"op": "aten::mm", "flops": 1e12, "intensity": 1365.3}, None)
    assert small[-1] == "0.91" and large[-1] == "1,365"
