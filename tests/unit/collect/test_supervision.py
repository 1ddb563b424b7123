"""How the parent waits for its child: a tick while it runs, its exit code at once after.

Real child processes (no torch), so the pidfd wait and the Popen fallback are both exercised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from sleeping_child import sleeping_child

from perfdoctor.collect import supervision
from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.supervision import ProcessTree, _exit_or_tick


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "popen-wait"])
def test_ticks_while_the_child_runs_then_gives_its_exit_code(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    proc = _child("import time, sys; time.sleep(0.6); sys.exit(3)")
    got = list(_exit_or_tick(proc, 0.1))
    assert got[-1] == 3 and proc.returncode == 3
    assert got[:-1] and all(tick is None for tick in got[:-1])


def _wake_ups() -> int:
    """This thread's voluntary context switches: each sleep it woke from."""
    status = Path("/proc/thread-self/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_the_wait_wakes_once_a_tick_not_in_a_polling_loop() -> None:
    if not hasattr(os, "pidfd_open") or not os.path.exists("/proc/thread-self/status"):
        pytest.skip("no pidfd_open or /proc/thread-self here")
    proc = _child("import time; time.sleep(1.5)")
    ticks = 0
    before = _wake_ups()
    for code in _exit_or_tick(proc, 0.25):
        if code is None:
            ticks += 1
    woke = _wake_ups() - before
    assert proc.returncode == 0 and ticks >= 2
    # Popen.wait(timeout=0.25) sleeps 0.5, 1, 2, ... 50 ms between polls: ~9 wake-ups a
    # tick, ~70 a second. The pidfd wait wakes once a tick and once for the exit.
    assert woke <= ticks + 3, (woke, ticks)


def test_supervise_returns_the_exit_code_of_a_child_that_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Watch:
        t0 = time.monotonic()
        polls = 0

        def poll(self) -> None:
            Watch.polls += 1

    proc = _child("raise SystemExit(7)")
    outcome = supervision.supervise(proc, Watch(), timeout_s=None)  # type: ignore[arg-type]
    assert outcome.exit_code == 7 and not outcome.timed_out


def test_the_samplers_lookup_feeds_the_tree_so_it_does_not_list_again() -> None:
    with sleeping_child() as worker:
        tree = ProcessTree(os.getpid())
        sampler = CpuSampler(os.getpid(), on_lookup=tree.saw)
        sampler.start()
        sampler.sample()  # the first tick looks the descendants up
        assert worker.pid in tree._seen
        listed_at = tree._listed_at
        tree.refresh(every_s=supervision.TREE_REFRESH_S)  # fed just now: no listing of its own
        assert tree._listed_at == listed_at
        tree.refresh()  # asked outright (a timeout, an interrupt): it lists
        assert tree._listed_at > listed_at
        assert isinstance(tree._seen[worker.pid], psutil.Process)
