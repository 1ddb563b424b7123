"""`perfdoctor diagnose TRACE` imports only what it uses (issue 30): no matplotlib (the
trace's step-time chart is written as SVG directly, render/line_svg.py), no torch, no
TensorBoard. matplotlib's import alone cost the command 0.75 s of CPU, more than the
analysis of a 180 MB trace. One child process running the real command on a small GPU trace
with DataLoader spans (its report draws the step time and the step breakdown, both written
as SVG directly) and no recorded shapes, no timing. A trace with shapes also draws the
per-op roofline (log axes), which matplotlib still draws.

`typer.completion` and pydantic are imported by typer itself (typer.main and its parameter
coercion, since typer 0.2x), whatever the command: not checked here."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from load_limits import scaled

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
try:
    app(["diagnose", {trace!r}, "-o", {out!r}, "--quiet"], prog_name="perfdoctor")
except SystemExit as exit:
    code = exit.code
print(code)
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in {banned!r})))
"""
BANNED = ("matplotlib", "torch", "tensorboard", "tensorflow", "PIL")


def test_diagnose_of_a_trace_imports_no_matplotlib_nor_torch(tmp_path: Path):
    out = tmp_path / "reports"
    trace = synthetic.write_trace(tmp_path / "t.pt.trace.json", synthetic.input_bound_trace())
    probe = _PROBE.format(trace=str(trace), out=str(out), banned=BANNED)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=scaled(120)
    )
    assert result.returncode == 0, result.stderr
    code, imported = result.stdout.splitlines()[-2:]
    assert code == "0", result.stderr
    # The command did draw its chart: the check is not vacuous.
    html = (out / "report.html").read_text(encoding="utf-8")
    for chart in ("step_time", "breakdown"):
        figure = re.search(rf'<figure id="chart-{chart}">(.*?)</figure>', html, re.DOTALL)
        assert figure is not None and '<div class="plot"><svg' in figure.group(1), chart
    assert imported == "", f"diagnose imported {imported}"
