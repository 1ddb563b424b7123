"""What a script leaves running never outlives perfdoctor (issue 31): a daemon that double-
forks and clears its environment (so no process group, session or environment variable
leads to it) is adopted by perfdoctor, the child subreaper, and stopped; non-daemon threads
that never end do not keep a run from finishing once the plan is done."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# No profiler window and no torch.optim: either imports torch._dynamo in the child (about
# 1.5 s of CPU each time); what is tested is what outlives the script, not its steps. With one
# warm-up step no FLOP count runs (it imports dynamo too), and steps are backward calls.
PLAN = ["--no-apply", "--steps", "4", "--warmup", "1", "--profile-steps", "0"]

TRAIN = """
import torch

model = torch.nn.Linear(4, 1)
for _ in range(1000):
    model.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
"""

DAEMON = """
import os, sys, time

if os.fork() == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    with open("daemon.pid", "w") as fh:
        fh.write(str(os.getpid()))
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"], {})
time.sleep(0.5)
"""

THREAD = """
import threading, time

def forever():
    while True:
        time.sleep(0.1)

threading.Thread(target=forever, name="never-ends").start()
"""


def _profile(tmp_path: Path, prelude: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "train.py").write_text(prelude + TRAIN)
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", *PLAN, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux subreaper")
def test_a_double_forked_daemon_with_no_environment_is_stopped(tmp_path: Path) -> None:
    proc = _profile(tmp_path, DAEMON)
    pid = int((tmp_path / "daemon.pid").read_text())
    try:
        assert proc.returncode == 0, proc.stderr
        assert not _running(pid), "the daemon outlived perfdoctor"
        assert "the script detached (a daemon) were terminated" in proc.stdout + proc.stderr
    finally:
        if _running(pid):
            os.kill(pid, 9)


def test_threads_that_never_end_do_not_hold_the_run(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = _profile(tmp_path, THREAD)
    assert proc.returncode == 0, proc.stderr
    assert "'never-ends' still ran after the planned steps" in proc.stderr
    assert time.monotonic() - start < 200  # a hang, not a timing claim
