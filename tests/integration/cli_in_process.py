"""`perfdoctor ...` run in the test's process (typer's CliRunner, stdout and stderr apart),
with a result that reads like a finished process's: for commands that start no child, where a
`python -m perfdoctor` process would cost a second of imports."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any


def run_in_process(
    *args: str | Path, env: Mapping[str, str] | None = None
) -> CompletedProcess[str]:
    """Exit code, stdout and stderr as a process would give them; an exception other than the
    command's own exit is raised here (a process would have printed "internal error")."""
    from typer.testing import CliRunner

    from perfdoctor.cli import app

    argv = [str(a) for a in args]
    got = CliRunner(env=dict(env or {})).invoke(app, argv)
    if got.exception is not None and not isinstance(got.exception, SystemExit):
        raise got.exception
    return CompletedProcess(argv, got.exit_code, got.stdout, got.stderr)


def report_json(session: Path) -> dict[str, Any]:
    """`perfdoctor report SESSION -f json`: the session re-analysed offline."""
    got = run_in_process("report", session, "-f", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def profile_in_process(
    *args: str | Path, cwd: Path, env: Mapping[str, str] | None = None
) -> CompletedProcess[str]:
    """`perfdoctor profile ...` with its parent in the test's process, in `cwd`: the script
    still runs in real child processes, as always. For tests of what a session records and
    reports; exit codes of the entry point, signals to perfdoctor and its own start-up stay
    with real `python -m perfdoctor` processes. Saves the parent's interpreter and imports,
    about a second of CPU a session (matplotlib's import alone is half of it).

    No test timeout wraps this: give `--timeout` so a hanging script is stopped by
    perfdoctor itself."""
    assert "--timeout" in [str(a) for a in args], "profile_in_process needs --timeout"
    before = Path.cwd()
    os.chdir(cwd)
    try:
        return run_in_process("profile", *args, env=env)
    finally:
        os.chdir(before)
