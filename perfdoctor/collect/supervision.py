"""Supervision of the child's processes: wait for the child within the timeout, and stop
its whole tree (its process group, the descendants that left the group, the ranks in
sessions of their own) with SIGTERM, a grace period to flush, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfdoctor.collect import tree_settle
from perfdoctor.errors import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from perfdoctor.collect.progress_watch import ProgressWatch

logger = logging.getLogger(__name__)

GRACE_S = 10.0  # SIGTERM -> SIGKILL: time for the child's `finally` to flush its artifacts
LEFTOVER_GRACE_S = 2.0  # processes the script left behind after it exited
SELF_EXIT_S = 1.0  # what the script started may still be ending on its own
# The parent's tick: the live display, the timeout and the process-tree refresh. The child
# flushes progress.jsonl at most every 0.25 s (step_log.PROGRESS_FLUSH_S), so a faster tick
# would show nothing sooner.
POLL_S = 0.25
# How often the child's process tree is listed: a descendant that leaves the child's process
# group (setsid, start_new_session) is still stopped with it if it was seen once. The CPU
# sampler's lookup (cpu_sampler.TREE_LOOKUP_PERIOD_S, 1 s) feeds the tree (ProcessTree.saw):
# a longer period here lets that lookup come first, and the tree lists on its own only when
# the sampler does not run.
TREE_REFRESH_S = 1.5


@dataclass
class ChildOutcome:
    """How the child ended, as the launcher saw it (manifest.py reads it into the manifest)."""

    exit_code: int | None = None  # raw child return code (negative: killed by that signal)
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    interrupt_code: int = EXIT_INTERRUPTED  # 130 for Ctrl-C, 128+n for SIGTERM/SIGHUP
    spawn_error: str | None = None
    internal_error: str | None = None
    stderr_tail: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)


def supervise(
    proc: subprocess.Popen[bytes],
    watch: ProgressWatch,
    timeout_s: float | None,
    tree: ProcessTree | None = None,
) -> ChildOutcome:
    for code in _exit_or_tick(proc, POLL_S):
        if code is not None:
            return ChildOutcome(exit_code=code)
        watch.poll()
        if tree is not None:
            tree.refresh(every_s=TREE_REFRESH_S)
        if timeout_s is not None and time.monotonic() - watch.t0 > timeout_s:
            logger.info("timeout after %.1f s: stopping the child", timeout_s)
            if tree is not None:
                tree.refresh()
            code = terminate_group(proc, GRACE_S)
            return ChildOutcome(exit_code=code, timed_out=True)
    raise AssertionError("unreachable: _exit_or_tick ends only with the exit code")


def _exit_or_tick(proc: subprocess.Popen[bytes], tick_s: float) -> Iterator[int | None]:
    """None every `tick_s` while the child runs, then its exit code.

    Waits on a pidfd where there is one (Linux >= 5.3): the parent then wakes once a tick.
    `Popen.wait(timeout)` polls instead, from 0.5 ms doubling to 50 ms, ~70 wake-ups a second
    that preempt the training thread wherever the two share a core (issue 30).
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or the child is reaped
        pidfd = None
    if pidfd is None:
        while True:
            try:
                yield proc.wait(timeout=tick_s)
                return
            except subprocess.TimeoutExpired:
                yield None
    try:
        while True:
            readable, _, _ = select.select([pidfd], [], [], tick_s)
            if readable:
                yield proc.wait()
                return
            yield None
    finally:
        os.close(pidfd)


class ProcessTree:
    """The child's descendants as last seen, to stop those that left its process group.

    killpg reaches DataLoader workers and everything else that stays in the child's group;
    a descendant that started its own session (a server the script launched with
    start_new_session=True, a daemon) is re-parented to init when the child dies and would
    keep running. psutil.Process remembers each one's start time, so a recycled pid is never
    signalled.
    """

    def __init__(self, root_pid: int) -> None:
        self._root_pid = root_pid
        self._seen: dict[int, Any] = {}
        self._listed_at = float("-inf")

    def refresh(self, every_s: float = 0.0) -> None:
        now = time.monotonic()
        if now - self._listed_at < every_s:
            return
        self._listed_at = now
        try:
            import psutil

            children = psutil.Process(self._root_pid).children(recursive=True)
        except Exception:  # gone already, or no psutil: killpg still covers the group
            return
        self.saw(children, now)

    def saw(self, children: list[Any], at: float | None = None) -> None:
        """Descendants listed elsewhere (the CPU sampler lists them once a second, from its
        own thread): refresh() need not read every process on the machine again so soon."""
        self._listed_at = time.monotonic() if at is None else at
        for child in children:
            self._seen.setdefault(child.pid, child)

    def stop_survivors(self, grace_s: float = LEFTOVER_GRACE_S) -> bool:
        """SIGTERM, then SIGKILL, every descendant seen that still runs; True if any did."""
        try:
            import psutil
        except ImportError:
            return False
        alive = []
        for process in list(self._seen.values()):  # (the sampler's thread adds)
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.Error:
                continue
        if not alive:
            return False
        terminate_then_kill(alive, grace_s)
        return True


def terminate_group(proc: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM the child's group, give it `grace_s` to flush, then SIGKILL; return its code.

    A second Ctrl-C during the grace period skips the rest of it.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    _signal_tree(proc, signal.SIGTERM)  # ranks in sessions of their own (torchrun)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        logger.info("child ignored SIGTERM for %.0f s: killing it", grace_s)
    except KeyboardInterrupt:
        logger.info("second interrupt: killing the child")
    _signal_group(proc.pid, signal.SIGKILL)
    _signal_tree(proc, signal.SIGKILL)
    return proc.wait()


def _signal_tree(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    run_dir = getattr(proc, "perfdoctor_run_dir", None)
    if run_dir is not None:
        tree_settle.signal_tree(run_dir, sig)


def end_leftovers(pgid: int) -> bool:
    """End processes still in the child's group (e.g. DataLoader workers); True if any were."""
    if not _group_alive(pgid):
        return False
    # Helpers that end themselves once the script has (multiprocessing's resource tracker
    # sees its pipe close) are not left behind: a moment for them first.
    deadline = time.monotonic() + SELF_EXIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not _group_alive(pgid):
            return False
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return True
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    return True


def _group_alive(pgid: int) -> bool:
    """True while a process of the group runs; zombies waiting for their reaper do not count.

    (kill(0) succeeds on zombies, and in containers whose PID 1 does not reap orphans they
    would make every run look like it left processes behind.)
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        import psutil
    except ImportError:
        return True
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def terminate_then_kill(processes: list[Any], grace_s: float) -> None:
    """SIGTERM each psutil.Process, SIGKILL those still running after `grace_s`, and reap them.
    Processes already gone are skipped."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _gone, still = psutil.wait_procs(processes, timeout=grace_s)
    for process in still:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(still, timeout=grace_s)
