"""`perfdoctor diagnose TRACE` imports only what it uses (issue 30): no matplotlib (the
trace's step-time chart is written as SVG directly, render/line_svg.py), no torch, no
TensorBoard. matplotlib's import alone cost the command 0.75 s of CPU, more than the
analysis of a 180 MB trace. One child process running the real command on a small GPU trace
with DataLoader spans (its report draws the step time and the step breakdown) and on one
with recorded shapes (the per-op roofline), all written as SVG directly; no timing.

`typer.completion` and pydantic are imported by typer itself (typer.main and its parameter
coercion, since typer 0.2x), whatever the command: not checked here."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

from load_limits import scaled

from tests.unit.analyze.gemm_trace import MM, gemm_trace

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_trace", Path(__file__).parent / "analyze" / "synthetic_trace.py"
)
assert _SPEC is not None and _SPEC.loader is not None
synthetic = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("synthetic_trace", synthetic)
_SPEC.loader.exec_module(synthetic)

_PROBE = """
import sys
from perfdoctor.cli import app
for trace, out in {runs!r}:
    try:
        app(["diagnose", trace, "-o", out, "--quiet"], prog_name="perfdoctor")
    except SystemExit as exit:
        print(exit.code)
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in {banned!r})))
"""
BANNED = ("matplotlib", "torch", "tensorboard", "tensorflow", "PIL")


def _figure(html: str, key: str) -> str:
    found = re.search(rf'<figure id="chart-{key}">(.*?)</figure>', html, re.DOTALL)
    return found.group(1) if found else ""


def test_diagnose_of_a_trace_imports_no_matplotlib_nor_torch(tmp_path: Path):
    loader = synthetic.write_trace(tmp_path / "loader.pt.trace.json", synthetic.input_bound_trace())
    shapes = tmp_path / "gemm.pt.trace.json"
    ops = [("aten::mm", [[1024, 2048], [2048, 4096]], ["c10::BFloat16"] * 2, MM, 100.0)] * 2
    shapes.write_text(json.dumps(gemm_trace(ops)))
    runs = [(str(loader), str(tmp_path / "loader")), (str(shapes), str(tmp_path / "gemm"))]
    probe = _PROBE.format(runs=runs, banned=BANNED)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=scaled(120)
    )
    assert result.returncode == 0, result.stderr
    *codes, imported = result.stdout.splitlines()[-3:]
    assert codes == ["0", "0"], result.stderr
    # The commands did draw their charts: the check is not vacuous.
    html = (tmp_path / "loader" / "report.html").read_text(encoding="utf-8")
    for chart in ("step_time", "breakdown"):
        assert '<div class="plot"><svg' in _figure(html, chart), chart
    html = (tmp_path / "gemm" / "report.html").read_text(encoding="utf-8")
    assert "Roofline of the ops</h3><svg" in html
    assert imported == "", f"diagnose imported {imported}"
