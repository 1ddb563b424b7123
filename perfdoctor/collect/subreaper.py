"""perfdoctor as the child subreaper of the run (Linux): processes the script orphans come to
it, not to init, so none outlives the run.

A daemon that double-forks (fork, setsid, fork, the middle process exits) and clears its
environment leaves everything perfdoctor tracks: its process group, its session, the
PERFDOCTOR_TREE variable (tree_settle.py), and its parent (re-parented to init, so it is no
descendant of the child either). 4 of 4 such daemons outlived perfdoctor (issue 31). With
prctl(PR_SET_CHILD_SUBREAPER) on perfdoctor, an orphaned descendant is re-parented to
perfdoctor instead: after the child has ended, every process below perfdoctor that started
after the child did is something the run left behind, and is stopped (and reaped: a
subreaper must reap its adopted children, or they stay zombies).

Without Linux or prctl nothing changes: the other means (process group, tree) still apply.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any

logger = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where that is unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def stop_being_subreaper() -> None:
    """Orphans go to init again: a long-lived process that ran the launcher in-process (an
    MCP server, a test runner) must not collect every later orphan as a zombie of its own."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    except (OSError, AttributeError):
        logger.debug("leaving the subreaper role failed", exc_info=True)


def adopted_since(started_at: float, exclude: set[int] | None = None) -> list[Any]:
    """Running descendants of this process created at or after `started_at` (time.time()
    seconds, as psutil counts) outside its own process group, but `exclude`: what a run
    that started then left behind. perfdoctor's own helpers (a tool it runs) stay in its
    group; the child's group is its own, and a daemon's is its session's."""
    try:
        import psutil

        me = psutil.Process(os.getpid())
        own_group = os.getpgrp()
        found = []
        for process in me.children(recursive=True):
            with contextlib.suppress(psutil.Error, OSError):
                if process.pid in (exclude or set()):
                    continue
                if process.create_time() + 0.01 < started_at:
                    continue
                if os.getpgid(process.pid) == own_group:
                    continue
                if process.status() == psutil.STATUS_ZOMBIE:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(process.pid, os.WNOHANG)  # reap what we adopted
                    continue
                found.append(process)
        return found
    except Exception:  # no psutil, or this process is going away: nothing more to do
        logger.debug("listing adopted processes failed", exc_info=True)
        return []
