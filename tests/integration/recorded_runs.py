"""Recorded run directories (tests/fixtures/integration_runs/, written and trimmed by
tools/record_fixture.py; its README says how each was recorded), analysed in the test's
process in place of a child run: for tests that read only what the analysis, the rules and
the renderers make of a run, where one real child run elsewhere proves the collect side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli_in_process import report_json, run_in_process

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "integration_runs"


def recorded(name: str) -> Path:
    run = RECORDED / name
    assert run.is_dir(), f"no recorded run {name} (record it with tools/record_fixture.py)"
    return run


def recorded_report(name: str) -> dict[str, Any]:
    """`perfdoctor report RUN -f json` and `-f md` on the recorded run, as `perfdoctor profile`
    writes them for a session (a lone run directory: nothing is written into it)."""
    run = recorded(name)
    md = run_in_process("report", run, "-f", "md")
    assert md.returncode == 0, md.stderr
    return {"run": run, "report": report_json(run), "md": md.stdout}
