"""The child runs the target exactly as plain `python` would, and keeps its exit status.

Real child processes, started as the launcher starts them (`python -c <ENTRY_CODE>
spec.json`), each a few seconds. `run_child` is shared with test_child_training.py;
`launch_child` goes through launch() where a test also checks what the launcher made of it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from load_limits import scaled
from test_launcher import TINY_PLAN, completed_module_run

from perfdoctor import rundir
from perfdoctor.collect import bootstrap
from perfdoctor.collect.launcher import ENTRY_CODE, launch
from perfdoctor.model import RunManifest, RunSpec, StepPlan, Target

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parent / "scripts"
REPO = Path(__file__).resolve().parents[2]
SMALL_PLAN = StepPlan(warmup_steps=1, timed_steps=3, profiled_steps=0)


@dataclass
class ChildRun:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def observations(self) -> dict[str, Any]:
        return rundir.read_json(self.run_dir / rundir.OBSERVATIONS_FILE)

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(rundir.read_jsonl(self.run_dir / rundir.STEPS_FILE))

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def write_spec(
    tmp_path: Path,
    name: str,
    *argv: str,
    kind: str = "script",
    cwd: Path = SCRIPTS,
    plan: StepPlan = SMALL_PLAN,
    **fields: Any,
) -> Path:
    run_dir = tmp_path / "run"
    fields.setdefault("profile", plan.profiled_steps > 0)
    spec = RunSpec(
        label="baseline",
        target=Target(kind=kind, name=name, argv=tuple(argv)),  # type: ignore[arg-type]
        cwd=str(cwd),
        run_dir=str(run_dir),
        plan=plan,
        **fields,
    )
    path = run_dir / rundir.SPEC_FILE
    rundir.write_json(path, rundir.to_jsonable(spec))
    return path


def bootstrap_command(spec_path: Path) -> list[str]:
    """The launcher's own command line: the frames above the script's are the launcher's."""
    return [sys.executable, "-c", ENTRY_CODE, str(spec_path)]


def run_child(tmp_path: Path, name: str, *argv: str, **options: Any) -> ChildRun:
    spec_path = write_spec(tmp_path, name, *argv, **options)
    spec = rundir.load_spec(spec_path.parent)
    proc = subprocess.run(
        bootstrap_command(spec_path),
        cwd=spec.cwd,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=scaled(180),
        check=False,
    )
    return ChildRun(proc.returncode, proc.stdout, proc.stderr, spec_path.parent)


def launch_child(
    tmp_path: Path, name: str, *argv: str, echo_output: bool = True, **options: Any
) -> tuple[ChildRun, RunManifest]:
    """`run_child` through launch(): the child's record and the launcher's manifest of the
    same run. stdout and stderr are the logs the launcher kept of them."""
    spec_path = write_spec(tmp_path, name, *argv, **options)
    run_dir = spec_path.parent
    manifest = launch(rundir.load_spec(run_dir), timeout_s=180, echo_output=echo_output)
    stdout = (run_dir / rundir.STDOUT_FILE).read_text()
    stderr = (run_dir / rundir.STDERR_FILE).read_text()
    return ChildRun(manifest.exit_code, stdout, stderr, run_dir), manifest


# --------------------------------------------------------------------------- tests


@dataclass
class Probe:
    """A child run and what its script wrote of what the interpreter gave it."""

    run: ChildRun
    written: Path

    @property
    def seen(self) -> dict[str, Any]:
        return json.loads(self.written.read_text())


@pytest.fixture(scope="module")
def script_probe(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    tmp_path = tmp_path_factory.mktemp("script")
    ours = tmp_path / "ours.json"
    run = run_child(tmp_path, os.path.join("sub", "argv_probe.py"), str(ours), "--flag")
    return Probe(run, ours)


@pytest.fixture(scope="module")
def module_probe(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    """test_launcher's completed run: `python -m pkg_demo.train` through launch()."""
    completed = completed_module_run(tmp_path_factory)
    run = ChildRun(
        completed.manifest.exit_code,
        (completed.run_dir / rundir.STDOUT_FILE).read_text(),
        (completed.run_dir / rundir.STDERR_FILE).read_text(),
        completed.run_dir,
    )
    return Probe(run, completed.report)


def test_script_sees_argv_file_path_and_cwd_as_plain_python_gives_them(
    tmp_path: Path, script_probe: Probe
) -> None:
    run = script_probe.run
    assert run.returncode == 0, run.output
    plain = tmp_path / "plain.json"
    subprocess.run(
        [sys.executable, os.path.join("sub", "argv_probe.py"), str(plain), "--flag"],
        cwd=SCRIPTS,
        check=True,
    )
    seen, expected = script_probe.seen, json.loads(plain.read_text())
    # Frames above the script's: the launcher's two, none under plain python (the frames
    # test checks them).
    del seen["frames_above"], expected["frames_above"]
    expected["argv"][1] = str(script_probe.written)
    assert seen == expected
    assert seen["argv"][0] == os.path.join("sub", "argv_probe.py")  # as typed
    assert seen["path0"] == str(SCRIPTS / "sub")
    assert seen["name"] == "__main__"


_SLICED_RUN: list[ChildRun] = []  # filled once per session


def sliced_run_that_exits_3(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """batch_shapes.py --slice for one epoch (50 steps), then sys.exit(3), under a plan it
    never completes: one child for the exit-code test here and the [--slice] case of
    test_child_training's batch-size test (the exit changes no step)."""
    if not _SLICED_RUN:
        plan = StepPlan(warmup_steps=1, timed_steps=100, profiled_steps=0)
        run = run_child(
            tmp_path_factory.mktemp("sliced"),
            "batch_shapes.py",
            *("--slice", "--epochs", "1", "--exit-code", "3"),
            plan=plan,
        )
        _SLICED_RUN.append(run)
    return _SLICED_RUN[0]


def test_sys_exit_code_is_the_childs_exit_code(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = sliced_run_that_exits_3(tmp_path_factory)
    assert run.returncode == 3, run.output
    obs = run.observations
    assert obs["exit_code"] == 3
    assert obs["script_exit_code"] == 3
    assert obs["plan_complete"] is False
    assert obs["stopped_by_perfdoctor"] is False
    # 500 samples in batches of 50, each fed in slices of 10: the script finished on its own.
    assert len(run.steps) == 50


def test_crash_at_step_n_keeps_n_steps_the_error_and_the_scripts_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Through the launcher: the child's record and traceback, and the manifest, logs and
    terminal output the launcher made of the crash."""
    plan = StepPlan(warmup_steps=1, timed_steps=10, profiled_steps=0)
    run, manifest = launch_child(tmp_path, "train_loop.py", "--crash-at", "3", plan=plan)
    assert run.returncode == 1, run.output
    assert manifest.status == "script_crashed", manifest
    assert manifest.error == "ValueError: planted crash at step 3"
    assert manifest.steps_seen == 3 and not manifest.plan_complete
    assert rundir.load_manifest(run.run_dir) == manifest
    assert "ValueError: planted crash at step 3" in capfd.readouterr().err
    assert [row["index"] for row in run.steps] == [0, 1, 2]
    obs = run.observations
    assert obs["error"] == "ValueError: planted crash at step 3"
    raise_line = _line_of(SCRIPTS / "train_loop.py", "raise ValueError")
    assert obs["error_location"] == {
        "file": "train_loop.py",
        "line": raise_line,
        "function": "train",
    }
    # Python's own traceback, starting at the script: no perfdoctor frames above it.
    traceback = run.stderr[run.stderr.index("Traceback (most recent call last):") :]
    first_frame = traceback.splitlines()[1]
    assert "train_loop.py" in first_frame
    # No frame of perfdoctor's own code. (Not the word "perfdoctor" anywhere: a checkout
    # cloned into a directory named perfdoctor has it in the script's own path.)
    package = Path(bootstrap.__file__).resolve().parents[1]
    frame_files = re.findall(r'^\s*File "([^"]+)"', traceback, flags=re.MULTILINE)
    assert frame_files, traceback
    assert not [f for f in frame_files if Path(f).resolve().is_relative_to(package)], traceback
    assert traceback.rstrip().endswith("ValueError: planted crash at step 3")


def test_cuda_out_of_memory_crash_is_flagged_for_the_memory_report(tmp_path: Path) -> None:
    run = run_child(tmp_path, "train_loop.py", "--crash-at", "2", "--crash-oom")
    assert run.returncode == 1, run.output
    obs = run.observations
    assert obs["cuda_oom"] is True
    assert obs["error"] == "OutOfMemoryError: CUDA out of memory (planted)"
    assert len(run.steps) == 2


def test_module_form_runs_like_python_dash_m_and_stops_after_the_plan(
    module_probe: Probe,
) -> None:
    run, report = module_probe.run, module_probe.written
    assert run.returncode == 0, run.output
    seen = module_probe.seen
    assert seen["argv"] == [
        str(SCRIPTS / "pkg_demo" / "train.py"),
        "--steps",
        "1000",
        "--report",
        str(report),
    ]
    assert (seen["name"], seen["spec"]) == ("__main__", "pkg_demo.train")
    obs = run.observations
    assert obs["stopped_by_perfdoctor"] is True
    assert obs["plan_complete"] is True
    assert len(run.steps) == TINY_PLAN.total_steps


def test_unknown_module_is_a_launch_error_with_exit_66(tmp_path: Path) -> None:
    run, manifest = launch_child(tmp_path, "pkg_demo.missing", kind="module", echo_output=False)
    assert run.returncode == 66, run.output
    assert manifest.status == "launch_failed", manifest
    assert manifest.error is not None and "pkg_demo.missing" in manifest.error
    assert rundir.load_manifest(run.run_dir) == manifest
    assert run.observations["launch_error"] == "module not found: pkg_demo.missing"
    # Said once, by perfdoctor's one-line error (the parent reads launch_error), not twice.
    assert "module not found" not in run.stderr
    assert run.steps == []


# Frames above the script's top-level one (`<string>` and bootstrap.main). Under anomaly
# mode every op records the whole Python stack, so each frame here costs on every op.
MAX_FRAMES_ABOVE_SCRIPT = 2


@pytest.mark.parametrize("kind", ["script", "module"])
def test_the_script_runs_at_most_a_few_frames_below_the_interpreter(
    request: pytest.FixtureRequest, kind: str
) -> None:
    """argv_probe.py and pkg_demo.train write the frames above their top-level one."""
    probe: Probe = request.getfixturevalue(f"{kind}_probe")
    assert probe.run.returncode == 0, probe.run.output
    above = probe.seen["frames_above"]
    assert len(above) <= MAX_FRAMES_ABOVE_SCRIPT, above


def test_the_time_origin_variable_matches_the_launchers() -> None:
    from perfdoctor.collect import launcher

    assert bootstrap.T0_ENV == launcher.T0_ENV


def _line_of(path: Path, marker: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {path}")
