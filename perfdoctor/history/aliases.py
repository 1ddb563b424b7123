"""`latest` and `previous` as runs for `perfdoctor compare`: a script's newest session in the
--out directory and the one before it, from the history index."""

from __future__ import annotations

from pathlib import Path

from perfdoctor.errors import TargetNotFound, UsageError
from perfdoctor.history.index import list_sessions
from perfdoctor.history.summary import SessionSummary

ALIASES = ("latest", "previous")


def is_alias(run: Path) -> bool:
    """A bare `latest` or `previous` that names no file or directory here."""
    return str(run) in ALIASES and not run.exists()


def resolve_alias(alias: str, out_dir: Path, script: str | None) -> Path:
    """The session directory `alias` stands for. Only sessions that measured a step time
    count (one stopped before its first timed step has nothing to compare)."""
    sessions = [s for s in list_sessions(out_dir, script) if s.step_ms_p50 is not None]
    what = f" of {script}" if script else ""
    if not sessions:
        raise TargetNotFound(
            f"'{alias}': no session{what} with a measured step time in {out_dir}",
            hint="perfdoctor history lists the sessions; --out names another directory",
        )
    if script is None:
        scripts = sorted({_script_key(s) for s in sessions})
        if len(scripts) > 1:
            raise UsageError(
                f"'{alias}' is ambiguous: {out_dir} holds sessions of {len(scripts)} scripts "
                f"({', '.join(scripts[:5])}{', ...' if len(scripts) > 5 else ''})",
                hint="say which with --script SCRIPT",
            )
    index = -1 if alias == "latest" else -2
    if len(sessions) < -index:
        raise TargetNotFound(
            f"'{alias}': only one session{what} with a measured step time in {out_dir}",
            hint="profile it once more, then compare previous latest",
        )
    return Path(sessions[index].path)


def _script_key(summary: SessionSummary) -> str:
    return summary.script_path or summary.script
