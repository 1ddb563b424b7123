"""Rendering and the TensorBoard export run offline: they must not pull in torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from load_limits import scaled

_PROBE = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {tests!r})
from render.fixtures import cpu_report
from perfdoctor.render.html import render_html
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.json_report import render_json
from perfdoctor.render.terminal import render_terminal, make_console
from perfdoctor.render.tensorboard_export import write_scalars
from perfdoctor.render.brief import render_brief
import perfdoctor.tensorboard_launch
try:  # the MCP server (the agent extra): only its profile tool's child imports torch
    import perfdoctor.handover.mcp_server
except ImportError:
    pass
report = cpu_report()
render_html(report); render_markdown(report); render_json(report); render_brief(report)
import os
render_terminal(report, make_console(open(os.devnull, "w")))
write_scalars(Path(tempfile.mkdtemp()), report)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pynvml"))
print(bad)
raise SystemExit(1 if bad else 0)
"""


def test_renderers_and_tensorboard_export_never_import_torch():
    tests_unit = str(Path(__file__).resolve().parents[1])
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(tests=tests_unit)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert result.returncode == 0, result.stdout + result.stderr
