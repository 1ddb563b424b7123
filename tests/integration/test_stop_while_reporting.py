"""A stop signal that lands while the reports are written (issue 25 item 2): the reports are
finished (the signal is held, report_signals.py), then perfdoctor ends with the signal's exit
code. Before, the signal cut the writing anywhere (mid-import of matplotlib) and no report
was left at all.

The moment is made reachable by the test-only PERFDOCTOR_TEST_HOLD_REPORTS, which pauses
inside the report writing and says so in a marker file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from load_limits import scaled

from perfdoctor.report_signals import TEST_HOLD_ENV

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The update by hand, no torch.optim: creating an optimizer imports torch._dynamo (torch's
# own lazy import, about 1.6 s of CPU per child), and what is tested here is the parent's
# report writing, which any session reaches. Steps are then counted by backward calls.
SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn

    model = nn.Linear(16, 1)
    for _ in range(10_000):
        loss = model(torch.randn(32, 16)).pow(2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
    """
)
HOLD_S = 4.0
PROFILE_ARGS = ("--steps", "3", "--warmup", "1", "--profile-steps", "0", "--no-apply")
PROFILE_ARGS += ("--quiet", "-o", "runs")


def _start(tmp_path: Path, marker: Path, hold_s: float) -> subprocess.Popen[str]:
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env[TEST_HOLD_ENV] = f"{marker}:{hold_s}"
    return subprocess.Popen(
        [sys.executable, "-m", "perfdoctor", "profile", *PROFILE_ARGS, "train.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal: a suite run in the background inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_marker(proc: subprocess.Popen[str], marker: Path) -> None:
    deadline = time.monotonic() + scaled(120)
    while not marker.exists():
        if proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"perfdoctor ended before writing its reports: {proc.returncode}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("perfdoctor never reached its reports")
        time.sleep(0.05)


def _end(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=scaled(90))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"perfdoctor did not end after the signal\n{out}\n{err}")


# Under nohup SIGHUP is ignored, and stays ignored in perfdoctor (on purpose): not testable.
_HUP = [] if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else [signal.SIGHUP]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, *_HUP])
def test_a_stop_while_the_reports_are_written_waits_for_them(
    tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "hold"
    hold_s = scaled(HOLD_S)
    proc = _start(tmp_path, marker, hold_s)
    _wait_for_marker(proc, marker)
    proc.send_signal(sig)
    _out, err = _end(proc)

    assert proc.returncode == 128 + sig, (proc.returncode, err)
    assert marker.read_text().split() == ["writing", "done"], "the writing was cut short"
    assert "internal error" not in err and "Traceback" not in err, err
    session = (tmp_path / "runs" / "latest").resolve()
    report = json.loads((session / "report.json").read_text())
    assert report["schema_version"]
    assert (session / "report.html").read_text().rstrip().endswith("</html>")
    assert (session / "report.md").stat().st_size > 0
    # One line says what happened; it names the session.
    assert "once the report was written" in err, err


def test_a_second_stop_cuts_the_held_writing_short(tmp_path: Path) -> None:
    marker = tmp_path / "hold"
    proc = _start(tmp_path, marker, 600.0)  # a hold that only the second signal ends
    _wait_for_marker(proc, marker)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _out, err = _end(proc)

    assert proc.returncode == 128 + signal.SIGINT, (proc.returncode, err)
    assert "done" not in marker.read_text()
    assert "internal error" not in err and "Traceback" not in err, err
    # The user insisted: the partial report (not held again) is what is left.
    session = (tmp_path / "runs" / "latest").resolve()
    assert json.loads((session / "report.json").read_text())["schema_version"]
    assert "partial report" in err, err
