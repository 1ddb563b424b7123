"""The CI regression gate end to end: `perfdoctor profile --repeat N --no-apply` records
repeated runs per side, and `perfdoctor compare --fail-if-slower` reads them.

One real session is recorded; the slower side is a copy of it whose recorded step times are
made three times longer (a 15 ms sleep per step made 45 ms, as a slower build would). That
profile measures a real script's step time is every A/B test's; here the gate's reading of
repeated runs and its exit codes are what is tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import profile_in_process
from load_limits import scaled

from perfdoctor import rundir
from perfdoctor.errors import EXIT_REGRESSION

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "sleepy_steps.py"


def perfdoctor(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=False,
    )


def record(tmp_path: Path, name: str, sleep_ms: int) -> Path:
    out = tmp_path / name
    # One warm-up step: the FLOP count of a second one imports torch._dynamo (about 1.5 s of
    # CPU in each of the two runs), and the gate reads step times, not FLOPs.
    proc = profile_in_process(
        "--repeat", "2", "--no-apply", "--steps", "8", "--warmup", "1",
        "--profile-steps", "0", "--quiet", "--timeout", f"{scaled(300):.0f}", "--out", out,
        SCRIPT, "--sleep-ms", str(sleep_ms),
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out / rundir.LATEST_LINK


def slowed_copy(session: Path, dest: Path, factor: float) -> Path:
    """A copy of a recorded session whose every run's steps took `factor` times as long."""
    shutil.copytree(session.resolve(), dest, symlinks=True)
    for steps in dest.rglob(rundir.STEPS_FILE):
        rows = [json.loads(line) for line in steps.read_text().splitlines() if line.strip()]
        for row in rows:
            row["wall_ms"] *= factor
        steps.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return dest


def test_repeated_no_apply_sessions_gate_a_planted_slowdown_and_a_speed_up(tmp_path: Path) -> None:
    a = record(tmp_path, "a", 15)
    baseline = a.resolve() / rundir.BASELINE_LABEL
    assert [p.name for p in rundir.repeat_dirs(baseline)] == ["baseline", "repeat-2"]
    # Only the run of each side (baseline/) ran under --no-apply: no variant directories.
    assert sorted(p.name for p in a.resolve().iterdir() if p.is_dir()) == ["baseline"]

    # The exit-0 path on repeated sessions is the speed-up below; A/A over repeated sessions
    # with a launch-to-launch spread measured on this script's kind of run is
    # tests/unit/test_regression_gate.py's.
    slow = slowed_copy(a, tmp_path / "slow", 3.0)
    gate = perfdoctor("compare", str(a), str(slow), "--fail-if-slower", "25", cwd=tmp_path)
    assert gate.returncode == EXIT_REGRESSION, gate.stdout + gate.stderr
    assert "FAILED: step time regression" in gate.stdout
    assert "2 vs 2 runs" in gate.stdout  # every repeat of each session counted
    # The other way round the change is a speed-up: the gate passes.
    faster = perfdoctor("compare", str(slow), str(a), "--fail-if-slower", "25", cwd=tmp_path)
    assert faster.returncode == 0, faster.stdout + faster.stderr
