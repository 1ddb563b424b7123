"""The sessions under an --out directory, newest first: what the MCP `history` tool lists and
what `latest` / `previous` name.

This reads the session directories themselves (session.json, report.json): the run history
of issue 28 (an SQLite index with `perfdoctor history`) is the place to read them from once it
exists; `list_sessions` is the one function to point at it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfdoctor.errors import TargetNotFound, UsageError
from perfdoctor.rundir import FIXES_PATCH, LATEST_LINK, REPORT_JSON, SESSION_FILE

log = logging.getLogger(__name__)

RUN_ALIASES = ("latest", "previous")


@dataclass(frozen=True)
class SessionEntry:
    """One session, as `history` shows it."""

    session_dir: str
    created_at: str
    script: str
    argv: tuple[str, ...]
    status: str | None  # None: no report.json (a session still running, or stopped early)
    step_ms_p50: float | None
    headline: str | None  # the lead finding's title
    accepted: tuple[str, ...]  # the accepted fixes' labels
    fixes_patch: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_dir": self.session_dir,
            "created_at": self.created_at,
            "script": self.script,
            "argv": list(self.argv),
            "status": self.status,
            "step_ms_p50": self.step_ms_p50,
            "headline": self.headline,
            "accepted": list(self.accepted),
            "fixes_patch": self.fixes_patch,
        }


def _read_json(path: Path) -> Mapping[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        log.debug("skipped %s: %s", path, err)
        return None
    return data if isinstance(data, Mapping) else None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _rows(value: object) -> list[Mapping[str, Any]]:
    return [row for row in value if isinstance(row, Mapping)] if isinstance(value, list) else []


def _entry(session_dir: Path) -> SessionEntry | None:
    session = _read_json(session_dir / SESSION_FILE)
    if session is None:
        return None
    target = _mapping(session.get("target"))
    report = _read_json(session_dir / REPORT_JSON) or {}
    baseline = _mapping(report.get("baseline"))
    findings = _rows(report.get("findings"))
    variants = _rows(report.get("variants"))
    patch = session_dir / FIXES_PATCH
    p50 = baseline.get("step_ms_p50")
    return SessionEntry(
        session_dir=str(session_dir),
        created_at=str(session.get("created_at", "")),
        script=str(target.get("name", "")),
        argv=tuple(str(a) for a in target.get("argv", ()) or ()),
        status=str(report["status"]) if "status" in report else None,
        step_ms_p50=float(p50) if isinstance(p50, (int, float)) else None,
        headline=str(findings[0].get("title")) if findings else None,
        accepted=tuple(str(v.get("label")) for v in variants if v.get("verdict") == "accepted"),
        fixes_patch=str(patch) if patch.is_file() else None,
    )


def _same_script(entry: SessionEntry, script: str) -> bool:
    if entry.script == script:
        return True
    return os.path.basename(entry.script) == os.path.basename(script) and (
        os.path.realpath(entry.script) == os.path.realpath(script)
        or os.path.basename(script) == script
    )


def list_sessions(out_dir: Path, script: str | None = None) -> list[SessionEntry]:
    """Every session under `out_dir` (newest first), or only those of `script` (a path, or a
    bare file name that matches any script of that name)."""
    if not out_dir.is_dir():
        return []
    entries = []
    for child in out_dir.iterdir():
        if child.name == LATEST_LINK or child.is_symlink() or not child.is_dir():
            continue
        entry = _entry(child)
        if entry is not None and (script is None or _same_script(entry, script)):
            entries.append(entry)
    # Session directories are named <time>-<script>: the name orders them when the clock in
    # created_at was the same second.
    entries.sort(key=lambda e: (e.created_at, Path(e.session_dir).name), reverse=True)
    return entries


def resolve_alias(name: str, out_dir: Path, script: str | None = None) -> Path:
    """`latest` or `previous`: the newest session under out_dir (of `script`), or the one
    before it."""
    if name not in RUN_ALIASES:
        raise UsageError(f"a run alias is one of {', '.join(RUN_ALIASES)}, not {name!r}")
    sessions = list_sessions(out_dir, script)
    index = RUN_ALIASES.index(name)
    if len(sessions) <= index:
        whose = f" of {script}" if script else ""
        raise TargetNotFound(
            f"no {name} session{whose} under {out_dir} ({len(sessions)} found)",
            hint="profile the script first",
        )
    return Path(sessions[index].session_dir)
