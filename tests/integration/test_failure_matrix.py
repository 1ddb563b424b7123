"""How a run with several training processes ends: a crashing trainer, a hang past `--timeout`,
Ctrl-C and SIGTERM, in each way of starting them (gloo, CPU).

Each ends as a single-process run does: the documented exit code (the script's own for a
crash, 124, 130, 143), a manifest and a partial report, the trainers' records kept, and no
process of the run left running. Cells tested elsewhere are left out here:
test_process_tree.py (mp.spawn: crash, timeout, Ctrl-C; `-- torchrun`: crash) and
test_ranks.py (`--nproc-per-node 2`: crash, timeout, Ctrl-C).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_process_tree import assert_nothing_left, needs_torchrun, processes

from perfdoctor.rundir import load_manifest

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts"
PLAN = ["--steps", "4", "--warmup", "1", "--profile-steps", "0", "--no-apply", "--quiet"]
WAIT_S = 120
DDP = str(SCRIPTS / "ddp_train.py")

# set-up -> (perfdoctor's options and the command, the script's option naming the failing one,
# the line the hanging one prints)
SETUPS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "spawn": ((str(SCRIPTS / "spawn_ddp.py"),), "rank", "worker 1 hangs"),
    "hogwild": ((str(SCRIPTS / "hogwild.py"),), "trainer", "trainer 1 hangs"),
    "torchrun": (("--", "torchrun", "--nproc-per-node", "2", DDP), "rank", "rank 1 hangs"),
    "nproc": (("--nproc-per-node", "2", DDP), "rank", "rank 1 hangs"),
}
CASES = [
    ("spawn", "sigterm"),
    ("hogwild", "crash"),
    ("hogwild", "timeout"),
    ("hogwild", "sigint"),
    ("hogwild", "sigterm"),
    pytest.param("torchrun", "timeout", marks=needs_torchrun),
    pytest.param("torchrun", "sigint", marks=needs_torchrun),
    pytest.param("torchrun", "sigterm", marks=needs_torchrun),
    ("nproc", "sigterm"),
]
EXPECTED = {  # failure -> (perfdoctor's exit code, the baseline's status)
    "crash": (1, "script_crashed"),
    "timeout": (124, "timeout"),
    "sigint": (130, "interrupted"),
    "sigterm": (143, "interrupted"),
}


def command(setup: str, failure: str) -> list[str]:
    target, who, _ = SETUPS[setup]
    options = ["--timeout", "12"] if failure == "timeout" else []
    planted = [f"--{'crash' if failure == 'crash' else 'hang'}-{who}", "1"]
    perfdoctor = [sys.executable, "-m", "perfdoctor", "profile", "--out", "runs", *PLAN]
    return [*perfdoctor, *options, *target, *planted]


def wait_for_hang(proc: subprocess.Popen[bytes], log: Path, line: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if log.is_file() and line in log.read_text():
            return
        if proc.poll() is not None:
            pytest.fail(f"perfdoctor ended ({proc.returncode}) before the hang")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"never saw {line!r}")


@pytest.mark.parametrize(("setup", "failure"), CASES)
def test_a_failing_or_stopped_run_ends_cleanly(tmp_path: Path, setup: str, failure: str) -> None:
    proc = subprocess.Popen(
        command(setup, failure),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # A shell's background jobs ignore SIGINT; perfdoctor must see it as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    baseline = tmp_path / "runs" / "latest" / "baseline"
    if failure in ("sigint", "sigterm"):
        wait_for_hang(proc, baseline / "stdout.log", SETUPS[setup][2])
        os.kill(proc.pid, signal.SIGINT if failure == "sigint" else signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    code, status = EXPECTED[failure]
    assert proc.returncode == code, err.decode()[-3000:]
    baseline = baseline.resolve()
    assert_nothing_left(baseline.parent)
    manifest = load_manifest(baseline)
    assert manifest.status == status
    assert (baseline.parent / "report.json").is_file()
    report = json.loads((baseline.parent / "report.json").read_text())
    assert report["exit_code"] == code and report["status"] == status
    if failure in ("sigint", "sigterm"):
        assert manifest.exit_code == code  # the manifest and the command agree
    if failure != "crash" and SETUPS[setup][2] in (baseline / "stdout.log").read_text():
        # Perfdoctor stops the trainers still running with SIGTERM, whatever stopped it:
        # each writes its record and says so. DDP ranks wait for the hanging one in their
        # all-reduce; the other Hogwild trainer runs on its own, so it may have finished its
        # plan (0), be stopped (143), or not have stepped yet (no record).
        codes = sorted(p["exit_code"] for p in processes(baseline))
        if setup == "hogwild":
            assert 143 in codes and set(codes) <= {0, 143}, codes
        else:
            assert codes == [143, 143]
    if failure == "crash":
        assert manifest.error is not None and "planted crash" in manifest.error
