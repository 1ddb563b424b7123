"""perfdoctor's child notices perfdoctor's death (SIGKILL, the OOM killer, a harness timeout)
and stops the run's whole process tree, which nobody else would.

perfdoctor stops the child's tree itself on Ctrl-C, SIGTERM and SIGHUP (supervision.py), but a
process killed by SIGKILL runs no code: its child, in a session of its own, would be
re-parented to init and train on, with its DataLoader workers and whatever it started.

- The launcher puts its pid in PERFDOCTOR_PARENT_PID. `arm()` runs first thing in every Python
  process of the run (inject/sitecustomize.py, and again in the bootstrap for a child started
  without `site`); only perfdoctor's direct child (its parent pid is that pid) acts on it. On
  Linux it asks the kernel for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), then
  checks the parent pid once more: perfdoctor may have died before the prctl. Elsewhere (or
  where prctl fails) a daemon thread polls os.getppid() and sends SIGTERM to its process.
  Only the direct child: a parent-death signal follows the *thread* that started a process,
  and threads of the user's own that start processes and end must not kill them.
- The child then gets an ordinary SIGTERM. The bootstrap's handler asks `orphaned()` and, when
  perfdoctor is gone, `stop_tree()` does what perfdoctor would have done: SIGTERM to the
  child's process group (DataLoader workers) and to every process of the run (found by
  PERFDOCTOR_TREE in their environment: processes in sessions of their own), then SIGKILL to
  those still running after ORPHAN_GRACE_S; the child itself flushes what it can and is
  gone by ORPHAN_EXIT_S.

A direct child that is a launcher (torchrun, `accelerate launch`) gets the same SIGTERM, which
makes it stop its ranks as it does for any SIGTERM.

Imports only the standard library at module level: sitecustomize imports it in every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

PARENT_ENV = "PERFDOCTOR_PARENT_PID"
TREE_ENV = "PERFDOCTOR_TREE"  # perfdoctor.collect.process_tree.TREE_ENV
PR_SET_PDEATHSIG = 1  # linux/prctl.h
POLL_S = 0.2  # the watchdog's period, where there is no parent-death signal
ORPHAN_GRACE_S = 0.5  # SIGTERM -> SIGKILL for the rest of the tree once perfdoctor is gone
ORPHAN_EXIT_S = 1.0  # the child itself is gone by then, its artifacts flushed or not


class _State:
    parent: int | None = None  # perfdoctor's pid, once this process is armed
    pid: int | None = None  # the process armed (a fork child inherits this state, not the arm)
    stopping_since: float | None = None  # monotonic time stop_tree was called


def expected_parent() -> int | None:
    """perfdoctor's pid, as the launcher gave it; None outside a run."""
    value = os.environ.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def arm(sig: int = signal.SIGTERM) -> bool:
    """In perfdoctor's direct child: be sent `sig` when perfdoctor dies. True when armed
    (now or earlier in this process); False in any other process."""
    if _State.parent is not None and _State.pid == os.getpid():
        return True
    parent = expected_parent()
    if parent is None or os.getppid() != parent:
        return False  # not perfdoctor's direct child (a grandchild inherits the variable)
    _State.parent, _State.pid = parent, os.getpid()
    if not _set_pdeathsig(sig):
        threading.Thread(
            target=_watch_parent, args=(parent, sig), name="perfdoctor-parent-watch", daemon=True
        ).start()
    elif os.getppid() != parent:
        # perfdoctor died between the fork and the prctl: its signal was never sent.
        os.kill(os.getpid(), sig)
    return True


def orphaned() -> bool:
    """True once perfdoctor (this process's parent at start) is gone."""
    return _State.parent is not None and _State.pid == os.getpid() and os.getppid() != _State.parent


def _set_pdeathsig(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, sig: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), sig)


# --------------------------------------------------------------------------- the tree


def stop_tree() -> None:
    """perfdoctor is gone: SIGTERM the rest of the run's tree now, SIGKILL what still runs
    after ORPHAN_GRACE_S, and end this process by ORPHAN_EXIT_S (a daemon thread does the
    waiting; `finish_stopping` does the SIGKILL part at once when the caller is done first).
    Called once, from the SIGTERM handler; further calls do nothing."""
    if _State.stopping_since is not None:
        return
    _State.stopping_since = started = time.monotonic()
    _signal_others(signal.SIGTERM)
    threading.Thread(
        target=_bound_the_end, args=(started,), name="perfdoctor-orphan", daemon=True
    ).start()


def finish_stopping() -> None:
    """SIGKILL the rest of the tree once its grace is over (at once if it is); the child
    calls it when done flushing, before it exits."""
    started = _State.stopping_since
    if started is None:
        return
    deadline = started + ORPHAN_GRACE_S
    while time.monotonic() < deadline and _others():
        time.sleep(0.02)
    _signal_others(signal.SIGKILL)


def leave_now(code: int) -> None:
    """End this orphaned process now: its atexit handlers (the script's too) run, but not the
    interpreter's teardown, which takes a second or more once torch is imported, while
    ORPHAN_EXIT_S still bounds the handlers (the thread `stop_tree` started)."""
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    _exit(code)


def _exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _bound_the_end(started: float) -> None:
    finish_stopping()
    time.sleep(max(0.0, started + ORPHAN_EXIT_S - time.monotonic()))
    # Still flushing (a profiler trace, a stuck collective): nobody waits for it any more.
    _exit(128 + signal.SIGTERM)


def _signal_others(sig: int) -> None:
    for pid in _others():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _others() -> list[int]:
    """Running processes of the run other than this one: this process's group (when it leads
    one, as the launcher starts it) and every process with this process's PERFDOCTOR_TREE
    (tree_settle.tree_pids finds them the same way)."""
    try:
        import psutil
    except ImportError:  # a dependency of perfdoctor's; the workers' own watchdogs remain
        return []
    me, uid = os.getpid(), os.getuid()
    lead_group = os.getpgrp() == me
    key = os.environ.get(TREE_ENV)
    found = []
    for proc in psutil.process_iter(["status", "uids"]):
        try:
            if proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if (lead_group and os.getpgid(proc.pid) == me) or (
                key and proc.environ().get(TREE_ENV) == key
            ):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found
