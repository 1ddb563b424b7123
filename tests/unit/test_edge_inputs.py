"""Issue 31's cases at the command line: each gives one clear line and its documented exit
code (README, "Exit codes"), or a report with a warning; never an internal error (64)."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.cli import app
from perfdoctor.errors import EXIT_BAD_RUN_DIR, EXIT_OUTPUT_UNWRITABLE

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


# ------------------------------------------------------------ output that cannot be written

TRACE = Path(__file__).parent / "analyze" / "fixtures" / "cuda_two_steps.json"


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_diagnose_out_that_is_or_is_under_a_file_is_73(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = blocker if where == "file" else blocker / "sub"
    result = _invoke("diagnose", str(TRACE), "-o", str(out))
    assert result.exit_code == EXIT_OUTPUT_UNWRITABLE, result.output
    assert "is not a directory" in result.output
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_diagnose_on_a_full_or_read_only_disk_is_73(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("perfdoctor.diagnose_traces.write_trace_reports", full)
    result = _invoke("diagnose", str(TRACE), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_OUTPUT_UNWRITABLE, result.output
    assert f"cannot write {tmp_path / 'out'}: {os.strerror(code)}" in result.output


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_report_output_onto_a_full_disk_is_73() -> None:
    result = _invoke("report", str(GOOD), "-f", "md", "-o", "/dev/full")
    assert result.exit_code == EXIT_OUTPUT_UNWRITABLE, result.output
    assert "cannot write /dev/full: No space left on device" in result.output


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("command", [["report", str(GOOD)], ["diagnose", str(TRACE)]])
def test_a_full_stdout_is_73_in_one_line(tmp_path: Path, command: list[str]) -> None:
    extra = ["-o", str(tmp_path / "out")] if command[0] == "diagnose" else []
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "perfdoctor", *command, *extra],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert proc.returncode == EXIT_OUTPUT_UNWRITABLE, proc.stderr
    assert "perfdoctor: error: cannot write its output: No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_report_on_a_full_disk_shows_the_report_then_is_73(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = tmp_path / "session"
    shutil.copytree(GOOD, session / "baseline")

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("perfdoctor.diagnose.write_reports", full)
    result = _invoke("report", str(session), "-f", "md")
    assert result.exit_code == EXIT_OUTPUT_UNWRITABLE, result.output
    assert result.output.startswith("# perfdoctor")
    assert "No space left on device" in result.output


# ------------------------------------------------------------------------ options and inputs


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--only", ",,,", "names no optimization id"),
        ("--skip", " , ", "names no optimization id"),
        ("--want-batch", str(2**70), "--want-batch must be 1..16,777,216"),
        ("--memory-limit", "9" * 400, "between 1MiB and 1EiB"),
        ("--memory-limit", "0.5", "between 1MiB and 1EiB"),
    ],
)
def test_profile_refuses_options_with_no_meaning(
    tmp_path: Path, option: str, value: str, says: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('never run')\n")
    result = _invoke("profile", option, value, str(script))
    assert result.exit_code == 2, result.output
    assert says in result.output


@pytest.mark.parametrize("command", ["compare", "report", "diagnose"])
def test_a_symlink_loop_is_a_missing_path(tmp_path: Path, command: str) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    args = [command, str(GOOD), str(loop)] if command == "compare" else [command, str(loop)]
    result = _invoke(*args)
    assert result.exit_code == 66, result.output
    assert result.output.count("perfdoctor: error:") == 1


def test_a_good_trace_beside_a_bad_one_is_reported_with_a_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRACE, run / "w0.1.pt.trace.json")
    (run / "w1.1.pt.trace.json").write_text('{"traceEvents": [')
    (run / "snap.pickle").write_text("garbage")
    result = _invoke("diagnose", str(run), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    warnings = json.loads((tmp_path / "out" / "report.json").read_text())["warnings"]
    assert any(w.startswith("skipped: corrupt trace") for w in warnings), warnings
    assert any(w.startswith("skipped: corrupt memory snapshot") for w in warnings), warnings


def test_a_completed_run_with_an_unreadable_trace_still_gets_its_report(tmp_path: Path) -> None:
    session = tmp_path / "session"
    shutil.copytree(GOOD, session / "baseline")
    (trace,) = (session / "baseline").glob("*.pt.trace.json.gz")
    trace.write_bytes(gzip.compress(b'{"traceEvents": [{"name": "tr"ain.py(4)"}]}'))
    out = tmp_path / "report.json"
    result = _invoke("report", str(session), "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    warnings = json.loads(out.read_text())["warnings"]
    assert any(w.startswith("trace not used: corrupt trace") for w in warnings), warnings
