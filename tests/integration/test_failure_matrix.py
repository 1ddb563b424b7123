"""How a run with several training processes ends: a crashing trainer, a hang past `--timeout`,
Ctrl-C and SIGTERM, in each way of starting them (gloo, CPU).

Each ends as a single-process run does: the documented exit code (the script's own for a
crash, 124, 130, 143), a manifest and a partial report, the trainers' records kept, and no
process of the run left running. Cells tested elsewhere are left out here:
test_process_tree.py (`-- torchrun`: crash) and test_ranks.py (`--nproc-per-node 2`: crash,
timeout, Ctrl-C).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from load_limits import scaled
from test_process_tree import assert_nothing_left, needs_torchrun, processes

from perfdoctor.rundir import load_manifest

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts"
PLAN = ["--steps", "4", "--warmup", "1", "--profile-steps", "0", "--no-apply", "--quiet"]
WAIT_S = 120
DDP = str(SCRIPTS / "ddp_train.py")


class SetUp(NamedTuple):
    target: tuple[str, ...]  # perfdoctor's options and the command
    who: str  # the script's option naming the failing one: --crash-<who> 1, --hang-<who> 1
    hang_line: str  # what the hanging one prints
    crash_error: str  # what the crashing one raises


SETUPS: dict[str, SetUp] = {
    "spawn": SetUp(
        (str(SCRIPTS / "spawn_ddp.py"),), "rank", "worker 1 hangs", "planted crash in worker 1"
    ),
    # The trainers update by hand: no torch.optim, whose first use imports torch._dynamo in
    # each trainer (DDP's ranks import it in any case).
    "hogwild": SetUp(
        (str(SCRIPTS / "hogwild.py"), "--update-by-hand"),
        "trainer",
        "trainer 1 hangs",
        "planted crash in trainer 1",
    ),
    "torchrun": SetUp(
        ("--", "torchrun", "--nproc-per-node", "2", DDP),
        "rank",
        "rank 1 hangs",
        "planted crash on rank 1",
    ),
    "nproc": SetUp(
        ("--nproc-per-node", "2", DDP), "rank", "rank 1 hangs", "planted crash on rank 1"
    ),
}
# A set-up's Ctrl-C and SIGTERM cells come before its timeout cell: they measure how long the
# set-up takes to reach its hang here, which sizes the timeout (run_into_the_timeout). The
# Hogwild cells are test_failure_matrix_hogwild.py's and the multi-rank set-ups' cells
# test_failure_matrix_ranks.py's: modules of their own, so that `--dist loadfile` can run the
# parts on different workers (a set-up's cells stay in one module, which keeps its signal
# cells before its timeout cell in one process).
CASES = [
    ("spawn", "crash"),
    ("spawn", "sigint"),
    ("spawn", "sigterm"),
    ("spawn", "timeout"),
]
HOGWILD_CASES = [
    ("hogwild", "crash"),
    ("hogwild", "sigint"),
    ("hogwild", "sigterm"),
    ("hogwild", "timeout"),
]
RANK_CASES = [
    pytest.param("torchrun", "sigint", marks=needs_torchrun),
    pytest.param("torchrun", "sigterm", marks=needs_torchrun),
    pytest.param("torchrun", "timeout", marks=needs_torchrun),
    ("nproc", "sigterm"),
]
EXPECTED = {  # failure -> (perfdoctor's exit code, the baseline's status)
    "crash": (1, "script_crashed"),
    "timeout": (124, "timeout"),
    "sigint": (130, "interrupted"),
    "sigterm": (143, "interrupted"),
}


# set-up -> seconds from perfdoctor's start to the hang line, as this module's Ctrl-C and
# SIGTERM cells last saw it on this machine
REACHED_HANG_S: dict[str, float] = {}
UNMEASURED_HANG_S = 15.0  # a timeout cell run without its set-up's signal cells


def command(setup: str, failure: str, timeout_s: int = 0) -> list[str]:
    target, who = SETUPS[setup].target, SETUPS[setup].who
    options = ["--timeout", str(timeout_s)] if failure == "timeout" else []
    planted = [f"--{'crash' if failure == 'crash' else 'hang'}-{who}", "1"]
    perfdoctor = [sys.executable, "-m", "perfdoctor", "profile", "--out", "runs", *PLAN]
    return [*perfdoctor, *options, *target, *planted]


def start(command: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # A shell's background jobs ignore SIGINT; perfdoctor must see it as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finish(proc: subprocess.Popen[bytes]) -> bytes:
    try:
        return proc.communicate(timeout=scaled(WAIT_S))[1]
    finally:
        proc.kill()


def wait_for_hang(proc: subprocess.Popen[bytes], log: Path, line: str) -> float:
    """Seconds until `line` is in the log (the planted hang reached)."""
    started = time.monotonic()
    deadline = started + WAIT_S
    while time.monotonic() < deadline:
        if log.is_file() and line in log.read_text():
            return time.monotonic() - started
        if proc.poll() is not None:
            pytest.fail(f"perfdoctor ended ({proc.returncode}) before the hang")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"never saw {line!r}")


def run_into_the_timeout(tmp_path: Path, setup: str) -> tuple[Path, subprocess.Popen[bytes], bytes]:
    """A run whose `--timeout` met the planted hang; return where it ran, its process, stderr.

    The timeout is half as much again (and 2 s) as this set-up's signal cells took to reach
    the hang moments ago on this machine at its present load; that measure includes
    perfdoctor's own start, before its clock starts. Where the load rose since, the timeout
    comes before the hang (no hang line in the log): the run is made again with the timeout
    doubled, so the cell always tests a timeout that stopped a hanging run.
    """
    timeout_s = 1.5 * REACHED_HANG_S.get(setup, UNMEASURED_HANG_S) + 2
    for attempt in range(3):
        where = tmp_path / f"attempt{attempt}"
        where.mkdir()
        proc = start(command(setup, "timeout", max(5, math.ceil(timeout_s))), where)
        err = finish(proc)
        assert_nothing_left(where / "runs")
        log = where / "runs" / "latest" / "baseline" / "stdout.log"
        if SETUPS[setup].hang_line in log.read_text():
            return where, proc, err
        timeout_s *= 2
    pytest.fail(f"--timeout came before the hang in 3 runs (last: {timeout_s / 2:.0f} s)")


@pytest.mark.parametrize(("setup", "failure"), CASES)
def test_a_failing_or_stopped_run_ends_cleanly(tmp_path: Path, setup: str, failure: str) -> None:
    check_the_cell(tmp_path, setup, failure)


def check_the_cell(tmp_path: Path, setup: str, failure: str) -> None:
    """One cell of the matrix: the run fails or is stopped `failure`'s way and ends cleanly."""
    if failure == "timeout":
        where, proc, err = run_into_the_timeout(tmp_path, setup)
    else:
        where, proc = tmp_path, start(command(setup, failure), tmp_path)
        if failure in ("sigint", "sigterm"):
            hang_log = where / "runs" / "latest" / "baseline" / "stdout.log"
            REACHED_HANG_S[setup] = wait_for_hang(proc, hang_log, SETUPS[setup].hang_line)
            os.kill(proc.pid, signal.SIGINT if failure == "sigint" else signal.SIGTERM)
        err = finish(proc)
    baseline = where / "runs" / "latest" / "baseline"
    code, status = EXPECTED[failure]
    assert proc.returncode == code, err.decode()[-3000:]
    baseline = baseline.resolve()
    assert_nothing_left(baseline.parent)
    manifest = load_manifest(baseline)
    assert manifest.status == status
    assert (baseline.parent / "report.json").is_file()
    report = json.loads((baseline.parent / "report.json").read_text())
    assert report["exit_code"] == code and report["status"] == status
    assert manifest.exit_code == code  # the manifest and the command agree
    if failure != "crash":
        # The run was stopped while hanging (the timeout cell made sure of it too).
        assert SETUPS[setup].hang_line in (baseline / "stdout.log").read_text()
        # Perfdoctor stops the trainers still running with SIGTERM, whatever stopped it:
        # each writes its record and says so. DDP ranks wait for the hanging one in their
        # all-reduce; the other Hogwild trainer runs on its own, so it may have finished its
        # plan (0), be stopped (143), or not have stepped yet (no record).
        listed = processes(baseline)
        codes = sorted(p["exit_code"] for p in listed)
        if setup == "hogwild":
            assert 143 in codes and set(codes) <= {0, 143}, codes
        else:
            assert codes == [143, 143]
            assert sorted(p["rank"] for p in listed) == [0, 1]  # each rank wrote its record
    if failure == "crash":
        assert manifest.error is not None and SETUPS[setup].crash_error in manifest.error
