"""Issue 31's cases at the command line: each gives one clear line and its documented exit
code (README, "Exit codes"), or a report with a warning; never an internal error (64)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.cli import app
from perfdoctor.errors import EXIT_BAD_RUN_DIR

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
GOOD = RUNS / "tabular_mlp_debug_cpu"


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _run_with_steps(tmp_path: Path, wall_ms: object, name: str = "b") -> Path:
    run = tmp_path / name
    shutil.copytree(GOOD, run)
    rows = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    text = "".join(json.dumps({**r, "wall_ms": wall_ms}) + "\n" for r in rows)
    (run / "steps.jsonl").write_text(text)
    return run


@pytest.mark.parametrize("wall_ms", [0, 1e-300, -5.0, 1e308, float("nan")])
@pytest.mark.parametrize("gate", [[], ["--fail-if-slower", "5"]])
def test_compare_refuses_a_run_with_no_usable_step(
    tmp_path: Path, wall_ms: float, gate: list[str]
) -> None:
    b = _run_with_steps(tmp_path, wall_ms)
    result = _invoke("compare", str(GOOD), str(b), *gate)
    assert result.exit_code == EXIT_BAD_RUN_DIR, result.output
    assert "has no usable step" in result.output
    assert result.output.count("perfdoctor: error:") == 1


def test_impossible_steps_among_good_ones_are_skipped_with_a_warning(tmp_path: Path) -> None:
    run = tmp_path / "mixed"
    shutil.copytree(GOOD, run)
    lines = (run / "steps.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    rows[-1]["wall_ms"] = 1e308
    (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "report.json"
    result = _invoke("report", str(run), "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    warnings = json.loads(out.read_text())["warnings"]
    assert any("1 step(s) record a time no step can take" in w for w in warnings), warnings


def test_an_empty_steps_file_is_a_warning(tmp_path: Path) -> None:
    run = tmp_path / "empty"
    shutil.copytree(GOOD, run)
    (run / "steps.jsonl").write_text("")
    out = tmp_path / "report.json"
    result = _invoke("report", str(run), "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    warnings = json.loads(out.read_text())["warnings"]
    assert any("steps.jsonl is empty" in w for w in warnings), warnings
