"""`perfdoctor view` as a user runs it: it prints the URL, serves the trace there, and stops
cleanly on Ctrl-C (exit code 130, as `perfdoctor tensorboard`), leaving the port free."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from cli_in_process import run_in_process
from load_limits import scaled

from perfdoctor.tensorboard_launch import profiler_plugin_installed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not profiler_plugin_installed(), reason="torch-tb-profiler is not installed"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "cnn_slow_dataloader_cpu"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _wait_for_url(process: subprocess.Popen[str], timeout_s: float) -> tuple[str, list[str]]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "trace viewer on http://" in line:
            return line.split(" on ", 1)[1].split()[0], lines
    raise AssertionError(f"no URL printed: {lines}")


def test_view_prints_the_url_serves_the_trace_and_stops_on_ctrl_c():
    process = subprocess.Popen(
        [sys.executable, "-m", "perfdoctor", "view", str(RUN)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        # Ctrl-C as in a terminal: a suite run in the background (nohup, CI, `&` in a
        # script) inherits SIGINT ignored, and then the server never saw it and the test
        # waited out its limit.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        url, lines = _wait_for_url(process, scaled(60))
        assert url.startswith("http://127.0.0.1:")
        assert any("perfdoctor track: 9 steps" in line for line in lines)
        with _OPENER.open(url + "trace.json", timeout=10) as response:
            served = json.loads(response.read())
        assert any(e.get("pid") == "perfdoctor" for e in served["traceEvents"])
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=scaled(20))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "Traceback" not in err
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))  # nothing serves there any more


def test_view_of_a_missing_path_exits_66(tmp_path: Path):
    # Refused before anything is served: in this process (cli_in_process.py), where a
    # `python -m perfdoctor` process would cost a second of imports.
    result = run_in_process("view", tmp_path / "nope")
    assert result.returncode == 66
    assert "does not exist" in result.stderr
