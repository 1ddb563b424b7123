"""`perfdoctor compare RUN_A RUN_B` from a shell, over copies of recorded CPU runs.

The text verdict runs in a real `python -m perfdoctor` process (what a shell prints); the JSON
output and the refused directory run in this process (cli_in_process.py: stdout and stderr
apart, the exit code as a process gives it), where a process would cost a second of imports
each; a process's own exit code on a refused input is test_cli_errors.py's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_in_process
from load_limits import scaled

from perfdoctor import errors

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def perfdoctor(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )


@pytest.fixture
def before_after(tmp_path: Path) -> tuple[Path, Path]:
    """A session whose baseline is the debug MLP, and a lone run of the tuned MLP."""
    before = tmp_path / "runs" / "20260101-000000-before"
    shutil.copytree(FIXTURES / "tabular_mlp_debug_cpu", before / "baseline")
    (tmp_path / "runs" / "latest").symlink_to(before.name, target_is_directory=True)
    after = tmp_path / "after"
    shutil.copytree(FIXTURES / "tuned_mlp_cpu", after)
    return tmp_path / "runs" / "latest", after


def test_compare_prints_the_verdict_differences_and_fixed_findings(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    before, after = before_after
    proc = perfdoctor("compare", str(before), str(after), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "B against A:" in out
    assert "different scripts" in out  # the loss is information only, and it says why
    assert "tabular_mlp_debug.py" in out and "tuned_mlp.py" in out
    assert "anomaly-detection-on" in out and "fixed in B" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "\x1b[" not in out


def test_compare_json_is_valid_json_on_stdout(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    before, after = before_after
    proc = run_in_process("compare", "--json", before, after)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"]["verdict"] in ("accepted", "rejected", "undecided")
    assert data["numerics_judged"] is False
    assert {f["rule_id"] for f in data["findings_fixed"]} == {
        "anomaly-detection-on",
        "grad-without-backward",
    }
    assert [d["name"] for d in data["differences"]] == ["script"]
    assert data["a"]["run_dirs"][0].endswith("baseline")


def test_compare_with_a_directory_that_is_no_run(
    before_after: tuple[Path, Path], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_in_process("compare", tmp_path / "empty", before_after[1])
    assert proc.returncode == errors.EXIT_BAD_RUN_DIR
    assert "Traceback" not in proc.stderr
    assert "not a perfdoctor run directory" in proc.stderr
