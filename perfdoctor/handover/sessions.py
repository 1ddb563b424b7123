"""The sessions under an --out directory, for the MCP tools: the run history's index
(perfdoctor/history/, the same rows as `perfdoctor history`) newest first, each with its
fixes.patch; and `latest` / `previous` as `perfdoctor compare` reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfdoctor.history import list_sessions
from perfdoctor.history.aliases import ALIASES as RUN_ALIASES
from perfdoctor.history.aliases import resolve_alias as _resolve_alias
from perfdoctor.rundir import FIXES_PATCH

__all__ = ["RUN_ALIASES", "resolve_alias", "session_rows"]


def session_rows(out_dir: Path, script: str | None = None) -> list[dict[str, Any]]:
    """Every session with a report under `out_dir` (of `script`), newest first: the history
    row, and `fixes_patch` (its path, or None)."""
    rows = []
    for summary in reversed(list_sessions(out_dir, script)):
        row = summary.to_dict()
        patch = Path(summary.path) / FIXES_PATCH
        row["fixes_patch"] = str(patch) if patch.is_file() else None
        rows.append(row)
    return rows


def resolve_alias(name: str, out_dir: Path, script: str | None = None) -> Path:
    """`latest` or `previous` (of `script`; needed when out_dir holds several scripts)."""
    return _resolve_alias(name, out_dir, script)
