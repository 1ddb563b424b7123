"""The step-time trend of a session's script over its past sessions: `Report.series
["history"]`, drawn by report.html (render/history_section.py).

Read from the --out directory the session lives in, when that is one (it holds the history
index or the `latest` link): a session directory copied anywhere else gets no trend, and
nothing is written beside it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfdoctor.history.index import INDEX_FILE, list_sessions
from perfdoctor.history.summary import (
    SessionSummary,
    accepted_fixes,
    fixed_variant,
    script_identity,
)
from perfdoctor.model import Report
from perfdoctor.rundir import LATEST_LINK, SESSION_FILE, read_json

log = logging.getLogger(__name__)

MAX_SESSIONS = 20  # the most recent ones; older sessions are in `perfdoctor history`
SERIES_KEY = "history"


def with_trend(session_dir: Path, report: Report) -> Report:
    """`report` with series["history"] when its script has past sessions beside it."""
    trend = trend_series(session_dir, report)
    if trend is None:
        return report
    return replace(report, series={**report.series, SERIES_KEY: trend})


def trend_series(session_dir: Path, report: Report) -> dict[str, Any] | None:
    out_dir = session_dir.parent
    if not ((out_dir / INDEX_FILE).is_file() or (out_dir / LATEST_LINK).is_symlink()):
        return None
    script, script_path, created_at = _identity(session_dir, report)
    try:
        rows = list_sessions(out_dir)
    except Exception as err:  # a trend is never worth a failed report
        log.warning("no step-time trend: %s", err)
        return None
    past = [
        r
        for r in rows
        if r.session != session_dir.name
        and (not created_at or r.created_at <= created_at)
        and _same_script(r, script, script_path)
    ]
    if not past:
        return None
    points = [_point(r) for r in past[-(MAX_SESSIONS - 1) :]]
    fixed = fixed_variant(report.variants)
    points.append(
        {
            "session": session_dir.name,
            "created_at": created_at or report.created_at,
            "step_ms_p50": report.baseline.step_ms_p50,
            "fixed_step_ms_p50": fixed.step_ms_p50 if fixed is not None else None,
            "accepted_fixes": list(accepted_fixes(report.variants)),
            "git_commit": _git_commit(session_dir),
            "current": True,
        }
    )
    return {"script": script, "sessions": points}


def _identity(session_dir: Path, report: Report) -> tuple[str, str | None, str]:
    """(script, its absolute path, when the session started), from session.json as the
    index rows have them (history/summary.py)."""
    try:
        session = read_json(session_dir / SESSION_FILE)
        script, path = script_identity(session["target"], str(session.get("cwd", "")))
        return script, path, str(session.get("created_at") or "")
    except Exception:  # no session.json, or not one perfdoctor wrote: the report's own name
        return report.script, None, ""


def _git_commit(session_dir: Path) -> str | None:
    try:
        git = read_json(session_dir / SESSION_FILE).get("git") or {}
    except Exception:
        return None
    commit = git.get("commit") if isinstance(git, dict) else None
    return commit if isinstance(commit, str) else None


def _same_script(row: SessionSummary, script: str, script_path: str | None) -> bool:
    if script_path is not None and row.script_path is not None:
        return row.script_path == script_path
    return row.script == script


def _point(row: SessionSummary) -> dict[str, Any]:
    return {
        "session": row.session,
        "created_at": row.created_at,
        "step_ms_p50": row.step_ms_p50,
        "fixed_step_ms_p50": row.fixed_step_ms_p50,
        "accepted_fixes": list(row.accepted_fixes),
        "git_commit": row.git_commit,
        "current": False,
    }
