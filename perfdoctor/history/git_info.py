"""The git commit of the script's repository, recorded when a session starts: which version
of the code a step time belongs to. Never fails a run: no git, no repository, a slow or
broken one all give None."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 5.0


def git_state(directory: Path) -> dict[str, Any] | None:
    """{"commit": sha, "dirty": bool} of the repository holding `directory`, else None.
    "dirty": tracked files differ from the commit (untracked ones are not counted)."""
    git = shutil.which("git")
    if git is None or not directory.is_dir():
        return None
    commit = _git(git, directory, "rev-parse", "--verify", "-q", "HEAD")
    if not commit:
        return None
    status = _git(git, directory, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _git(git: str, directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            [git, "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as err:
        log.debug("git %s: %s", args[0], err)
        return None
    return done.stdout.strip() if done.returncode == 0 else None
