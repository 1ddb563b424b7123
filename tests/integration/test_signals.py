"""SIGTERM to perfdoctor ends like Ctrl-C: the child's whole process tree stops, the manifest
and a partial report are written, the exit code is 143, and the run re-renders as stopped.

Slurm (time limit, preemption), CI cancellation, `timeout` and `kill` all send SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from cli_in_process import report_json
from load_limits import scaled

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "runs" / "tuned_mlp_cpu"
EXIT_SIGTERM = 128 + signal.SIGTERM

# A slow training loop with DataLoader workers (in the child's process group) and a helper
# process in a session of its own (outside the group: killpg alone misses it). Debug mode on,
# so the diagnosis has a runtime fix (anomaly-off) to try as a variant. The update is by
# hand, no torch.optim: creating an optimizer imports torch._dynamo (torch's own lazy import,
# about 1.6 s of CPU per child), and nothing here reads the optimizer.
SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.autograd.set_detect_anomaly(True)
    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )

    class Slow(Dataset):
        def __len__(self):
            return 10**6

        def __getitem__(self, i):
            return torch.randn(8), torch.randn(1)

    model = nn.Linear(8, 1)
    for x, y in DataLoader(Slow(), batch_size=4, num_workers=2):
        loss = ((model(x) - y) ** 2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
        time.sleep(0.05)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "perfdoctor", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, what: str, proc: subprocess.Popen[str], limit_s: float = 240.0):
    deadline = time.monotonic() + scaled(limit_s)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"perfdoctor ended before {what}: {proc.returncode}\n{out}\n{err}")
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _still_running(processes: list[psutil.Process]) -> list[str]:
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(process.cmdline())[:120])
        except psutil.Error:
            continue
    return alive


def _terminate_when(
    proc: subprocess.Popen[str], ready, what: str, min_descendants: int
) -> tuple[list[psutil.Process], str, str]:
    """SIGTERM perfdoctor once `ready()` holds and its tree is fully up; return the tree
    seen just before, and perfdoctor's output."""
    _wait_for(ready, what, proc)
    tree = _wait_for(
        lambda: (t := _descendants(proc.pid)) and len(t) >= min_descendants and t,
        f"{min_descendants} descendants",
        proc,
    )
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=scaled(60))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"perfdoctor did not end within 60 s of SIGTERM\n{out}\n{err}")
    return tree, out, err


def _steps_in(run_dir: Path) -> int:
    path = run_dir / "progress.jsonl"
    return path.read_text().count("\n") if path.is_file() else 0


def test_sigterm_during_the_baseline_stops_the_tree_and_keeps_a_partial_report(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = _start(["profile", "--steps", "2000", "--quiet", "train.py"], tmp_path)
    baseline = tmp_path / "perfdoctor-runs" / "latest" / "baseline"
    # perfdoctor's child, its 2 DataLoader workers and the helper that left the group.
    tree, out, err = _terminate_when(proc, lambda: _steps_in(baseline) >= 3, "3 steps", 4)

    assert proc.returncode == EXIT_SIGTERM, err
    assert not _still_running(tree), _still_running(tree)
    assert "stopped by SIGTERM during baseline" in err
    session = baseline.parent.resolve()
    manifest = json.loads((baseline / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["exit_code"] == EXIT_SIGTERM
    assert manifest["steps_seen"] >= 3
    recorded = json.loads((session / "session.json").read_text())["interrupted"]
    assert recorded == {"by": "SIGTERM", "exit_code": EXIT_SIGTERM, "during": "baseline"}
    assert "status interrupted, exit code 143" in out
    markdown = (session / "report.md").read_text()
    assert "**Status:** interrupted (exit code 143)" in markdown
    assert "stopped by SIGTERM during baseline" in markdown

    # Re-rendered offline, it still reads as stopped, never as a completed clean run.
    again = report_json(session)
    assert again["status"] == "interrupted"
    assert again["exit_code"] == EXIT_SIGTERM
    assert "No bottleneck rule fired on this run." not in markdown


def test_sigterm_during_a_variant_keeps_the_baselines_report(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    args = ["profile", "--steps", "5", "--warmup", "1", "--profile-steps", "0", "--quiet"]
    proc = _start([*args, "--only", "anomaly-off", "train.py"], tmp_path)
    session_link = tmp_path / "perfdoctor-runs" / "latest"
    # anomaly-off switches between steps: it is measured in the in-process A/B run "ab".
    variant = session_link / "ab"
    seen_report_before_variant = {}

    def variant_running() -> bool:
        if not variant.is_dir():
            return False
        # Written as soon as the baseline was diagnosed, before the first variant started.
        seen_report_before_variant["md"] = (session_link / "report.md").is_file()
        return _steps_in(variant) >= 1

    tree, _out, err = _terminate_when(proc, variant_running, "the variant's first step", 4)

    assert proc.returncode == EXIT_SIGTERM, err
    assert not _still_running(tree), _still_running(tree)
    assert seen_report_before_variant["md"]
    session = session_link.resolve()
    assert json.loads((session / "baseline" / "manifest.json").read_text())["status"] == (
        "completed"
    )
    stopped = json.loads((variant / "manifest.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["exit_code"] == EXIT_SIGTERM
    report = report_json(session)
    assert report["status"] == "interrupted"
    assert report["exit_code"] == EXIT_SIGTERM
    assert any("during ab" in w and "partial" in w for w in report["warnings"])
    # The baseline's diagnosis survived the stop.
    assert any(f["rule_id"] == "anomaly-detection-on" for f in report["findings"])


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import tensorboard"], capture_output=True).returncode,
    reason="tensorboard is not installed",
)
def test_sigterm_stops_the_tensorboard_server(tmp_path: Path) -> None:
    from perfdoctor.tensorboard_launch import free_port

    port = free_port()

    def serving() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    proc = _start(["tensorboard", str(FIXTURE), "--port", str(port)], tmp_path)
    tree, _out, err = _terminate_when(proc, serving, "TensorBoard to serve", 1)
    assert proc.returncode == EXIT_SIGTERM, err
    assert not _still_running(tree), _still_running(tree)


def test_sigkill_of_perfdoctor_stops_the_tree(tmp_path: Path) -> None:
    """SIGKILL (kill -9, the OOM killer, a harness's timeout) runs none of perfdoctor's code:
    its child learns of it from the kernel (collect/parent_death.py) and stops the tree."""
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = _start(["profile", "--steps", "100000", "--no-apply", "--quiet", "train.py"], tmp_path)
    baseline = tmp_path / "perfdoctor-runs" / "latest" / "baseline"
    _wait_for(lambda: _steps_in(baseline) >= 1, "a step", proc)
    # perfdoctor's child, its 2 DataLoader workers and the helper in a session of its own.
    tree = _wait_for(
        lambda: (t := _descendants(proc.pid)) and len(t) >= 4 and t, "4 descendants", proc
    )
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + scaled(2.0)  # a bound on a hang, generous for a loaded machine
    try:
        while _still_running(tree) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _still_running(tree), _still_running(tree)
    finally:
        for process in tree:
            with contextlib.suppress(psutil.Error):
                process.kill()
