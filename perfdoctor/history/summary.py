"""One row of the history: a session's summary, built from its saved artifacts.

Pure: `summarize` takes session.json and report.json as decoded JSON; `load_summary` only
reads the two files. The same summary comes out of a session whenever it is read, so the
index can always be rebuilt from the session directories.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from perfdoctor.errors import PerfdoctorError
from perfdoctor.rundir import REPORT_JSON, SESSION_FILE, read_json

log = logging.getLogger(__name__)

ROW_VERSION = 1  # bump when a field's meaning changes: older rows are then rebuilt


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A session as `perfdoctor history` lists it. JSON: `to_dict()` (msgspec builtins)."""

    session: str  # the session directory's name: <YYYYmmdd-HHMMSS>-<script>
    path: str  # the session directory, absolute
    created_at: str  # ISO 8601, with the UTC offset, when the session started
    script: str  # as given to `perfdoctor profile` ("-m pkg.train" for a module)
    script_path: str | None  # the script's absolute path (None for a module or a command)
    argv: tuple[str, ...]  # the script's own arguments
    git_commit: str | None  # HEAD of the script's repository when the session started
    git_dirty: bool | None  # tracked files differed from that commit
    status: str  # how the baseline run ended: completed, crashed, interrupted, timeout, ...
    interrupted: bool  # perfdoctor itself was stopped (Ctrl-C, SIGTERM): a partial report
    step_ms_p50: float | None  # the baseline's median step time
    fixed_step_ms_p50: float | None  # with the accepted fixes (stacked, else the best one)
    speedup: float | None  # that variant's measured speedup over the baseline
    headline: str  # what holds training back, the report's first sentence
    accepted_fixes: tuple[str, ...]  # optimization ids perfdoctor accepted
    device: str | None
    row_version: int = ROW_VERSION

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def script_identity(target: Mapping[str, Any], cwd: str) -> tuple[str, str | None]:
    """(script as given, absolute path of a script file or None)."""
    kind, name = str(target.get("kind", "script")), str(target.get("name", ""))
    if kind == "module":
        return f"-m {name}", None
    if kind != "script" or not name:
        return name, None
    return name, os.path.normpath(os.path.join(cwd, name))


def summarize(
    session_dir: Path, session: Mapping[str, Any] | None, report: Mapping[str, Any]
) -> SessionSummary:
    """The summary of one session; `session` is None for a session.json that is missing or
    unreadable (the report alone then says what ran)."""
    from perfdoctor.render.json_report import report_from_dict
    from perfdoctor.render.summary import headline

    asked: Mapping[str, Any] = session or {}
    built = report_from_dict(report)
    target = asked.get("target") if isinstance(asked.get("target"), Mapping) else None
    if target is not None:
        script, script_path = script_identity(target, str(asked.get("cwd", "")))
        argv = tuple(str(a) for a in target.get("argv", ()))
    else:
        script, script_path, argv = built.script, None, tuple(built.argv)
    git: Mapping[str, Any] = asked["git"] if isinstance(asked.get("git"), Mapping) else {}
    fixed = fixed_variant(built.variants)
    return SessionSummary(
        session=session_dir.name,
        path=str(session_dir),
        created_at=str(asked.get("created_at") or built.created_at or ""),
        script=script,
        script_path=script_path,
        argv=argv,
        git_commit=git.get("commit") if isinstance(git.get("commit"), str) else None,
        git_dirty=git.get("dirty") if isinstance(git.get("dirty"), bool) else None,
        status=str(built.status),
        interrupted=isinstance(asked.get("interrupted"), Mapping),
        step_ms_p50=built.baseline.step_ms_p50,
        fixed_step_ms_p50=fixed.step_ms_p50 if fixed is not None else None,
        speedup=fixed.speedup if fixed is not None else None,
        headline=headline(built).slow,
        accepted_fixes=accepted_fixes(built.variants),
        device=built.device.name if built.device is not None else None,
    )


def _accepted_variants(variants: Sequence[Any]) -> list[Any]:
    # A peel comparison judges the stack without one fix, not a fix against the baseline.
    return [v for v in variants if v.verdict == "accepted" and not getattr(v, "peel_of", None)]


def accepted_fixes(variants: Sequence[Any]) -> tuple[str, ...]:
    ids: list[str] = []
    for variant in _accepted_variants(variants):
        for opt in variant.optimizations:
            if opt not in ids:
                ids.append(opt)
    return tuple(ids)


def fixed_variant(variants: Sequence[Any]) -> Any | None:
    """The accepted variant that stands for "with the fixes": the stack of them when it was
    accepted (it holds the most), else the fastest accepted one."""
    accepted = [v for v in _accepted_variants(variants) if v.step_ms_p50 is not None]
    if not accepted:
        return None
    return max(accepted, key=lambda v: (len(v.optimizations), v.speedup or 0.0))


def load_summary(session_dir: Path) -> SessionSummary | None:
    """The summary of a session directory; None when it has no readable report.json (a
    session still running, or one whose report was never written)."""
    try:
        report = read_json(session_dir / REPORT_JSON)
    except (OSError, ValueError, PerfdoctorError) as err:
        log.debug("no history row for %s: %s", session_dir, err)
        return None
    try:
        session = read_json(session_dir / SESSION_FILE)
    except (OSError, ValueError, PerfdoctorError):
        session = None
    if not isinstance(report, dict) or report.get("source", "run") != "run":
        return None  # `perfdoctor diagnose` reports: no session behind them
    try:
        return summarize(session_dir, session if isinstance(session, dict) else None, report)
    except (PerfdoctorError, ValueError, TypeError, KeyError, AttributeError) as err:
        log.warning("no history row for %s: its report.json is unusable (%s)", session_dir, err)
        return None


def summary_to_json(summary: SessionSummary) -> str:
    return json.dumps(summary.to_dict(), sort_keys=True)


def summary_from_json(text: str) -> SessionSummary | None:
    try:
        summary = msgspec.json.decode(text.encode(), type=SessionSummary)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return summary if summary.row_version == ROW_VERSION else None
