"""launch(): real child processes (the real bootstrap) on CPU, kept short.

A crash, an unknown module and the frames above the script are checked through launch() in
test_child_launch.py, with the child's own record of the same run.

Each test that spawns a child costs a few seconds (the child imports torch), so the scripts
are tiny and the step plans small.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest
from load_limits import scaled

from perfdoctor.collect.launcher import Progress, launch
from perfdoctor.collect.target import validate_target
from perfdoctor.errors import TargetInvalid, TargetNotFound
from perfdoctor.model import RunManifest, RunSpec, StepPlan, Target
from perfdoctor.rundir import load_manifest, read_jsonl, to_jsonable

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TINY_PLAN = StepPlan(warmup_steps=2, timed_steps=3, profiled_steps=0)

HANG_WITH_WORKERS = """
import subprocess, sys, time
from pathlib import Path

workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
           for _ in range(2)]
Path("workers.txt").write_text(" ".join(str(w.pid) for w in workers))
print("workers started", flush=True)
time.sleep(600)
"""

# Workers started, then training that never ends: a step every 250 ms (sleeping, so waiting
# for the timeout costs no CPU), so the timeout lands in the middle of a training loop. The
# update is by hand: torch.optim's first use imports torch._dynamo (about 1.6 s of CPU), and
# steps counted by backward calls serve the timeout as well.
TRAIN_FOREVER_WITH_WORKERS = """
import subprocess, sys, time
from pathlib import Path

import torch

workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
           for _ in range(2)]
Path("workers.txt").write_text(" ".join(str(w.pid) for w in workers))
print("workers started", flush=True)
model = torch.nn.Linear(4, 1)
while True:
    loss = model(torch.randn(8, 4)).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    time.sleep(0.25)
"""


def make_spec(tmp_path: Path, source: str, *, name: str = "train.py", **kwargs: object) -> RunSpec:
    (tmp_path / name).write_text(textwrap.dedent(source))
    return RunSpec(
        label="baseline",
        target=Target(kind="script", name=name),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "run" / "baseline"),
        plan=TINY_PLAN,
        profile=False,
        **kwargs,  # type: ignore[arg-type]
    )


def ended(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper (containers whose PID 1 does not reap)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class CompletedRun:
    """`python -m pkg_demo.train` run through launch() to the end of its plan."""

    manifest: RunManifest
    run_dir: Path
    progress: list[Progress]
    terminal_out: str  # what launch() echoed
    terminal_err: str
    report: Path  # what the script wrote of its argv, name, spec and frames


_COMPLETED_RUN: list[CompletedRun] = []  # filled once per session


def completed_module_run(tmp_path_factory: pytest.TempPathFactory) -> CompletedRun:
    """One child for the completed-run and timeout tests here and the module-form and frame
    tests in test_child_launch.py. Whichever test asks first runs it, so what launch()
    echoes is captured here rather than by that test's capfd."""
    if not _COMPLETED_RUN:
        tmp_path = tmp_path_factory.mktemp("completed")
        report = tmp_path / "report.json"
        argv = ("--steps", "1000", "--report", str(report))
        spec = RunSpec(
            label="baseline",
            target=Target(kind="module", name="pkg_demo.train", argv=argv),
            cwd=str(SCRIPTS),
            run_dir=str(tmp_path / "run" / "baseline"),
            plan=TINY_PLAN,
            profile=False,
            env={"PERFDOCTOR_TEST_ENV": "from-spec"},
        )
        seen: list[Progress] = []
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            manifest = launch(spec, timeout_s=120, on_progress=seen.append)
        run = CompletedRun(
            manifest, Path(spec.run_dir), seen, out.getvalue(), err.getvalue(), report
        )
        _COMPLETED_RUN.append(run)
    return _COMPLETED_RUN[0]


def test_completed_run_streams_progress_and_keeps_the_logs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    completed = completed_module_run(tmp_path_factory)
    manifest, run_dir, seen = completed.manifest, completed.run_dir, completed.progress

    assert manifest.status == "completed", manifest
    assert manifest.exit_code == 0
    assert manifest.steps_seen == TINY_PLAN.total_steps
    assert manifest.plan_complete and manifest.step_detection == "optimizer"
    assert manifest.wall_s > 0
    assert load_manifest(run_dir) == manifest  # what was returned is what is on disk

    assert [p.step for p in seen] == list(range(TINY_PLAN.total_steps))
    assert {p.planned_steps for p in seen} == {TINY_PLAN.total_steps}
    assert {p.label for p in seen} == {"baseline"}

    assert "hello from stdout from-spec" in (run_dir / "stdout.log").read_text()
    stderr_log = (run_dir / "stderr.log").read_text()
    assert "hello from stderr" in stderr_log and "USDT:" in stderr_log
    terminal_out, terminal_err = completed.terminal_out, completed.terminal_err
    assert "hello from stdout" in terminal_out
    assert "hello from stderr" in terminal_err and "USDT:" not in terminal_err
    assert "before the profiling started" in stderr_log
    assert "before the profiling started" not in terminal_err
    assert "a warning of the script's own" in terminal_err

    assert {"spec", "stdout", "stderr", "samples", "steps"} <= set(manifest.artifacts)
    samples = list(read_jsonl(run_dir / "samples.jsonl"))
    assert samples[0]["kind"] == "clock"
    assert any(row["kind"] == "cpu" and "rss_bytes" in row for row in samples)


def test_timeout_kills_the_child_and_its_workers(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The timeout's SIGTERM ends the child in the middle of training: it flushes its record
    (the steps it saw) and its workers are gone."""
    plan = StepPlan(warmup_steps=1, timed_steps=10**6, profiled_steps=0)
    spec = replace(make_spec(tmp_path, TRAIN_FOREVER_WITH_WORKERS), plan=plan)
    # A tiny completed run (start, import torch, 5 steps, flush) took `wall_s` here; this
    # script reaches its first steps sooner, so half as much again is ample at the present
    # load.
    timeout_s = max(4.0, 1.5 * completed_module_run(tmp_path_factory).manifest.wall_s)
    manifest = launch(spec, timeout_s=timeout_s, echo_output=False)

    assert manifest.status == "timeout", manifest
    assert manifest.exit_code == 124
    assert load_manifest(Path(spec.run_dir)) == manifest
    # The child ended on the SIGTERM and flushed its record then: stopped within the grace
    # period, not killed when it ran out.
    observations = json.loads((Path(spec.run_dir) / "observations.json").read_text())
    assert observations["signal"] == "SIGTERM"
    assert observations["exit_code"] == 128 + signal.SIGTERM  # the child's own exit status
    rows = list(read_jsonl(Path(spec.run_dir) / "steps.jsonl"))
    assert rows and len(rows) == observations["steps_seen"]
    workers = [int(pid) for pid in (tmp_path / "workers.txt").read_text().split()]
    assert len(workers) == 2
    assert all(ended(pid) for pid in workers)
    assert "workers started" in (Path(spec.run_dir) / "stdout.log").read_text()


def test_ctrl_c_ends_the_child_writes_the_manifest_and_reraises(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, HANG_WITH_WORKERS)
    driver = textwrap.dedent(
        """
        import json, signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from perfdoctor.collect.launcher import launch
        from perfdoctor.rundir import spec_from_dict
        try:
            launch(spec_from_dict(json.loads(sys.argv[1])), timeout_s=120, echo_output=False)
        except KeyboardInterrupt:
            sys.exit(130)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", driver, json.dumps(to_jsonable(spec))])
    workers_file = tmp_path / "workers.txt"
    deadline = time.monotonic() + scaled(90)
    while not workers_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # the file is written before the script prints; let it finish writing
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=scaled(60)) == 130

    manifest = load_manifest(Path(spec.run_dir))
    assert manifest.status == "interrupted"
    assert manifest.exit_code == 130
    workers = [int(pid) for pid in workers_file.read_text().split()]
    assert workers and all(ended(pid) for pid in workers)


def test_python_that_cannot_start_still_leaves_a_manifest(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "print('never runs')\n")
    manifest = launch(spec, python=str(tmp_path / "no-such-python"), echo_output=False)
    assert manifest.status == "launch_failed"
    assert manifest.exit_code == 69
    assert manifest.error is not None and "no-such-python" in manifest.error
    assert manifest.steps_seen == 0
    assert load_manifest(Path(spec.run_dir)) == manifest


def test_target_errors_are_caught_before_any_launch(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("for i in range(3)\n    pass\n")
    with pytest.raises(TargetInvalid, match=r"^broken\.py:1: SyntaxError: "):
        validate_target(Target(kind="script", name="broken.py"), tmp_path)
    with pytest.raises(TargetNotFound, match="no such file"):
        validate_target(Target(kind="script", name="missing.py"), tmp_path)
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(TargetInvalid, match="not a Python script"):
        validate_target(Target(kind="script", name="notes.txt"), tmp_path)
