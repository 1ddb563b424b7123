"""`os.setpgrp()` in a script works under perfdoctor as it does under plain `python`.

perfdoctor starts the child in a session of its own (launcher.py: start_new_session), so
that killpg reaches every process of the run and the terminal's job control cannot stop it
while it reads stdin. A session leader may not change its process group, so the kernel
answers setpgid(0, 0) with EPERM, and a script that calls `os.setpgrp()` (to be the leader
of its own process group, and signal its workers as a group) failed under perfdoctor only.

It asked for what it already has: a session leader leads its own process group. So for the
child that is the leader of its session, a setpgrp() / setpgid(0 or self, 0 or self) that
the kernel refuses with EPERM is answered as done. Every other call, and every other
process (workers the script forks are no session leaders), goes to the kernel unchanged.
"""

from __future__ import annotations

import functools
import os


def _already_own_group_leader() -> bool:
    pid = os.getpid()
    try:
        return os.getsid(0) == pid and os.getpgrp() == pid
    except OSError:
        return False


def _is_self(pid: int) -> bool:
    return pid in (0, os.getpid())


def install() -> None:
    """Wrap os.setpgrp and os.setpgid (once) as the module docstring says."""
    if not hasattr(os, "setpgrp") or getattr(os.setpgrp, "_perfdoctor", False):
        return
    original_setpgrp = os.setpgrp
    original_setpgid = os.setpgid

    @functools.wraps(original_setpgrp)
    def setpgrp() -> None:
        try:
            original_setpgrp()
        except PermissionError:
            if not _already_own_group_leader():
                raise

    @functools.wraps(original_setpgid)
    def setpgid(pid: int, pgrp: int) -> None:
        try:
            original_setpgid(pid, pgrp)
        except PermissionError:
            if not (_is_self(pid) and _is_self(pgrp) and _already_own_group_leader()):
                raise

    for wrapper in (setpgrp, setpgid):
        setattr(wrapper, "_perfdoctor", True)  # noqa: B010 (a function attribute)
    os.setpgrp = setpgrp  # type: ignore[assignment]
    os.setpgid = setpgid  # type: ignore[assignment]


__all__ = ["install"]
