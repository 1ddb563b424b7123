"""Nothing fails silently: a collector that fails leaves a warning in the manifest and the
report. (A crashed script's error line under --quiet, and which side failed:
test_profile_e2e.py; a module that is not found, said once: test_cli_errors.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from load_limits import scaled

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TRAIN_LOOP = REPO / "tests" / "integration" / "scripts" / "train_loop.py"
SHORT = ("--no-apply", "--steps", "3", "--warmup", "1")


def run_cli(*args: str, cwd: Path | bytes) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=scaled(300),
    )


def test_a_failing_profiler_leaves_a_warning_in_the_manifest_and_the_report(
    tmp_path: Path,
) -> None:
    # torch.profiler cannot encode a working directory whose name is not valid UTF-8.
    where = os.fsencode(tmp_path) + b"/bad\xffdir"
    try:
        os.mkdir(where)
    except (OSError, UnicodeError):
        pytest.skip("this filesystem refuses names that are not valid UTF-8")
    shutil.copy(TRAIN_LOOP, where + b"/train.py")
    proc = run_cli(
        "profile",
        *SHORT,
        "--profile-steps",
        "1",
        "--quiet",
        "train.py",
        "--epochs",
        "20",
        cwd=where,
    )
    assert proc.returncode == 0, proc.stderr
    session = Path(os.fsdecode(where)) / "perfdoctor-runs" / "latest"
    manifest = json.loads((session / "baseline" / "manifest.json").read_text())
    failed = [w for w in manifest["warnings"] if w.startswith("profiler failed")]
    assert failed, manifest["warnings"]
    assert "no profiler trace" in failed[0]
    report = (session / "report.md").read_text(encoding="utf-8")
    assert "profiler failed" in report
    assert "warning: profiler failed" in proc.stdout
