"""Errors a user can cause: one clear line, a documented exit code, no perfdoctor traceback.

Errors found before any child starts run in this process (typer's CliRunner, stdout and
stderr apart): a `python -m perfdoctor` process costs a second of imports each. Real
processes remain for one such error (the exit code and stderr of the process itself) and for
the paths that start a child (a script that never trains, a module not found).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from cli_in_process import run_in_process
from load_limits import scaled

from perfdoctor import errors

pytestmark = pytest.mark.integration


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=scaled(180),
    )


def run_here(*args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> CompletedProcess[str]:
    """The same command in this process, in `cwd`."""
    monkeypatch.chdir(cwd)
    return run_in_process(*args)


def assert_one_clear_line(proc: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if "perfdoctor: error:" in line]
    assert len(error_lines) == 1, proc.stderr
    assert words in error_lines[0]


def test_missing_script(tmp_path: Path) -> None:
    proc = run_cli("profile", "nope.py", cwd=tmp_path)
    assert_one_clear_line(proc, errors.EXIT_TARGET_NOT_FOUND, "nope.py")


def test_directory_instead_of_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    proc = run_here("profile", "pkg", cwd=tmp_path, monkeypatch=monkeypatch)
    assert_one_clear_line(proc, errors.EXIT_TARGET_NOT_FOUND, "directory")


def test_non_python_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    proc = run_here("profile", "data.csv", cwd=tmp_path, monkeypatch=monkeypatch)
    assert_one_clear_line(proc, errors.EXIT_TARGET_INVALID, "data.csv")


def test_syntax_error_names_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.py").write_text("import os\n\ndef f(:\n    pass\n")
    proc = run_here("profile", "bad.py", cwd=tmp_path, monkeypatch=monkeypatch)
    assert_one_clear_line(proc, errors.EXIT_TARGET_INVALID, "bad.py:3")


def test_not_a_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_here("report", "empty", cwd=tmp_path, monkeypatch=monkeypatch)
    assert_one_clear_line(proc, errors.EXIT_BAD_RUN_DIR, "not a perfdoctor run directory")


def test_script_that_never_trains(tmp_path: Path) -> None:
    (tmp_path / "idle.py").write_text("import torch\nprint('hello', torch.ones(2).sum().item())\n")
    proc = run_cli("profile", "--no-apply", "idle.py", cwd=tmp_path)
    assert_one_clear_line(proc, errors.EXIT_NO_TRAINING, "never trained")
    assert "hello 2.0" in proc.stdout
    latest = tmp_path / "perfdoctor-runs" / "latest"
    assert (latest / "report.json").is_file()


def test_unknown_module(tmp_path: Path) -> None:
    runs = tmp_path / "perfdoctor-runs"
    earlier = runs / "20260101-000000-train"
    earlier.mkdir(parents=True)
    (runs / "latest").symlink_to(earlier.name, target_is_directory=True)
    proc = run_cli("profile", "--no-apply", "-m", "no_such_pkg.train", cwd=tmp_path)
    assert_one_clear_line(proc, errors.EXIT_TARGET_NOT_FOUND, "no_such_pkg")
    # Said once (not echoed by the child as well), and nothing ran: `latest` stays where it
    # was and no empty session is left behind.
    assert proc.stderr.count("no_such_pkg") == 1, proc.stderr
    assert os.readlink(runs / "latest") == earlier.name
    assert sorted(p.name for p in runs.iterdir()) == [earlier.name, "latest"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_output_that_fills_up_during_the_run_is_one_line_and_73(tmp_path: Path) -> None:
    # A file-size limit stands in for a full disk: each write past it fails (EFBIG), in the
    # child's step log as in perfdoctor's own files; no traceback reads as the script's.
    # The update is by hand: torch.optim's first use imports torch._dynamo (about 1.6 s of
    # CPU), and no check here reads the optimizer.
    import resource

    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(4, 1)\n"
        "for _ in range(60):\n"
        "    model(torch.randn(8, 4)).pow(2).mean().backward()\n"
        "    with torch.no_grad():\n"
        "        for p in model.parameters():\n"
        "            p -= 0.1 * p.grad\n"
        "    model.zero_grad()\n"
    )

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1200, 1200))

    args = ["--no-apply", "--steps", "40", "--warmup", "1", "--profile-steps", "0", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", *args, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(180),
        preexec_fn=limit_file_size,
    )
    assert_one_clear_line(proc, errors.EXIT_OUTPUT_UNWRITABLE, "cannot write")
    assert "File too large" in proc.stderr
