"""perfdoctor's direct child is told of perfdoctor's death (collect/parent_death.py): by the
kernel's parent-death signal on Linux, by a watchdog thread elsewhere or where prctl fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from load_limits import scaled

from perfdoctor.collect import parent_death

# A stand-in for perfdoctor: starts the armed child, prints its pid, then waits to be killed.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    env = dict(os.environ, PERFDOCTOR_PARENT_PID=str(os.getpid()))
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env)
    print(child.pid, flush=True)
    time.sleep(60)
    """
)
CHILD = textwrap.dedent(
    """
    import time
    from perfdoctor.collect import parent_death
    {setup}
    print(parent_death.arm(), flush=True)
    time.sleep(60)
    """
)


def _child_ends_with_its_parent(setup: str = "", *, parent_killed_here: bool = True) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD.format(setup=setup)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    try:
        if parent_killed_here:
            assert parent.stdout.readline().strip() == "True"  # armed
            parent.kill()
        parent.wait(timeout=scaled(60))
        deadline = time.monotonic() + scaled(5.0)  # a bound on a hang
        while time.monotonic() < deadline:
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the child outlived its parent")
    finally:
        parent.kill()
        if child.is_running():
            child.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_parent_death_signal_reaches_the_direct_child() -> None:
    _child_ends_with_its_parent()


def test_watchdog_where_there_is_no_parent_death_signal() -> None:
    _child_ends_with_its_parent("parent_death._set_pdeathsig = lambda sig: False")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_parent_gone_before_the_signal_was_set() -> None:
    # perfdoctor died between the fork and the prctl: the kernel never sends the signal, so
    # arm() looks at the parent once more and sends it itself.
    _child_ends_with_its_parent(
        "import os, signal\n"
        "real = parent_death._set_pdeathsig\n"
        "def late(sig):\n"
        "    parent = os.getppid()\n"
        "    os.kill(parent, signal.SIGKILL)\n"
        "    while os.getppid() == parent:\n"
        "        time.sleep(0.01)\n"
        "    return real(sig)\n"
        "parent_death._set_pdeathsig = late",
        parent_killed_here=False,
    )


def test_only_perfdoctors_direct_child_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parent_death.PARENT_ENV, raising=False)
    assert parent_death.arm() is False
    monkeypatch.setenv(parent_death.PARENT_ENV, str(os.getppid() + 1))
    assert parent_death.arm() is False  # a grandchild: the variable is inherited
    assert parent_death.orphaned() is False
