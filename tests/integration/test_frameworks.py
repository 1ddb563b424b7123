"""Training frameworks as users run them, unchanged, under `perfdoctor profile` (CPU, small,
few steps): optimizers that run the forward and backward inside `optimizer.step(closure)`
(LBFGS, PyTorch Lightning), and Hugging Face Trainer / Accelerate, which rebuild the script's
DataLoader and accumulate gradients: test_frameworks_workers.py, a module of its own so that
the two halves run on different workers of the suite.

Lightning, transformers and accelerate are an optional test extra (`pip install -e
.[frameworks]`, installed by `tools/install.sh --dev`); their tests skip without them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import profile_in_process
from load_limits import scaled

from perfdoctor import rundir

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts" / "frameworks"
TIMED = 8
# Rules that a closure counted as optimizer time used to fire.
OPTIMIZER_RULES = {"single-tensor-optimizer"}
OPTIMIZER_FIXES = {"fused-optimizer"}


NO_APPLY = ("--no-apply",)


def profile(
    tmp_path: Path,
    script: str,
    *args: str,
    options: tuple[str, ...] = NO_APPLY,
    timed: int = TIMED,
    env: dict[str, str] | None = None,
) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "runs"
    proc = profile_in_process(
        *options, "--quiet", "--timeout", f"{scaled(600):.0f}",
        "--steps", str(timed), "--warmup", "2", "--profile-steps", "0",
        "--out", out, SCRIPTS / script, *args,
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", **(env or {})},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    session = (out / rundir.LATEST_LINK).resolve()
    return session, json.loads((session / "report.json").read_text())


def timed_steps(session: Path) -> list[dict[str, Any]]:
    rows = rundir.read_jsonl(session / rundir.BASELINE_LABEL / rundir.STEPS_FILE)
    return [r for r in rows if r["phase"] == "timed"]


def phase_sum(row: dict[str, Any]) -> float:
    keys = ("data_wait_ms", "forward_ms", "backward_ms", "optimizer_ms")
    return sum(row.get(k) or 0.0 for k in keys)


def assert_phases_within_the_step(rows: list[dict[str, Any]]) -> None:
    """No phase is counted twice: each step's phases add up to at most its wall time (a
    clock read apart), and over the timed steps to nearly all of it."""
    for row in rows:
        assert phase_sum(row) <= row["wall_ms"] * 1.01 + 0.05, row


def assert_no_false_optimizer_finding(report: dict[str, Any]) -> None:
    assert not OPTIMIZER_RULES & {f["rule_id"] for f in report["findings"]}
    assert not OPTIMIZER_FIXES & {r["optimization_id"] for r in report["recommendations"]}


def test_lbfgs_closure_steps_and_phases(tmp_path: Path) -> None:
    # One intra-op thread, as for every framework here (test_frameworks_workers.py too).
    session, report = profile(tmp_path, "lbfgs_closure.py", env={"OMP_NUM_THREADS": "1"})
    rows = timed_steps(session)
    assert len(rows) == TIMED
    assert report["baseline"]["step_detection"] == "optimizer"
    # max_iter=4: LBFGS evaluates the closure (one forward and backward) four times per
    # optimizer.step call; each evaluation is a step of its own (README, "How a run works").
    assert report["baseline"]["micro_batches_per_step"] == 1
    assert_phases_within_the_step(rows)
    # Each step is one closure evaluation: a forward and a backward of its own (LBFGS's own
    # update math between evaluations is the step's "other").
    assert all(r["forward_ms"] and r["backward_ms"] for r in rows)
    # The update alone: what is left of optimizer.step once the closure is taken out.
    assert sum(r["optimizer_ms"] or 0.0 for r in rows) < sum(r["backward_ms"] for r in rows)
    assert_no_false_optimizer_finding(report)


@pytest.fixture(scope="module")
def lightning_stopped(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path, dict[str, Any]]:
    """One Lightning session under the default early stop, read by the two tests below: its
    working directory, session directory and report."""
    pytest.importorskip("lightning")
    cwd = tmp_path_factory.mktemp("lightning")
    # One intra-op thread: on a loaded 2-core machine, two threads meeting at a barrier
    # make every small op cost a scheduler slice, and the SGD update alone can then really
    # take a quarter of the step (a true finding). One thread keeps the update's true share
    # small, so a single-tensor-optimizer finding could only come from miscounted phases.
    session, report = profile(
        cwd, "lightning_closure.py", "--root", str(cwd), env={"OMP_NUM_THREADS": "1"}
    )
    return cwd, session, report


def test_lightning_automatic_optimization_is_timed_right_to_the_phase(
    lightning_stopped: tuple[Path, Path, dict[str, Any]],
) -> None:
    _, session, report = lightning_stopped
    rows = timed_steps(session)
    assert len(rows) == TIMED
    assert report["baseline"]["step_detection"] == "optimizer"
    assert report["baseline"]["micro_batches_per_step"] == 1
    assert all(r["forward_ms"] and r["backward_ms"] and r["optimizer_ms"] for r in rows)
    assert_phases_within_the_step(rows)
    assert_no_false_optimizer_finding(report)


def test_lightning_stopped_early_says_where_and_leaves_its_own_logs(
    lightning_stopped: tuple[Path, Path, dict[str, Any]],
) -> None:
    """The default early stop: Lightning's end of training does not run, and the report
    says where perfdoctor stopped the script."""
    cwd, session, report = lightning_stopped
    assert not (cwd / "ended.json").exists()
    end = report["script_end"]
    assert end["stopped_by_perfdoctor"] is True
    assert end["step"] == 2 + TIMED  # warm-up + timed: the step that would have begun next
    # The stop came through the user's `trainer.fit(...)` line.
    assert end["location"].endswith(" in <module>")
    assert "lightning_closure.py:" in end["location"]
    markdown = (session / "report.md").read_text()
    assert f"stopped by perfdoctor at step {2 + TIMED}" in markdown
    assert "--run-to-end" in markdown
    # Lightning's words because the stop came through Lightning's trainer (issue 32).
    assert end["framework"] == "lightning"
    assert "final checkpoint, logger finalisation" in markdown
    assert report["removed_outputs"] == []  # the only run is the user's own
    assert sorted(p.name for p in (cwd / "lightning_logs").iterdir()) == ["version_0"]


def test_lightning_run_to_end_finishes_and_removes_the_reruns_logs(tmp_path: Path) -> None:
    """--run-to-end: the trainer ends FINISHED (on_train_end ran); the second run's
    lightning_logs/version_1 is perfdoctor's litter and goes, the first run's stays."""
    pytest.importorskip("lightning")
    _, report = profile(
        tmp_path,
        "lightning_closure.py",
        "--epochs",
        "1",  # 8 steps: the 6 of the plan and 2 more, run to the end
        options=("--no-apply", "--run-to-end", "--repeat", "2"),
        timed=4,
        env={"OMP_NUM_THREADS": "1"},
    )
    ended = json.loads((tmp_path / "ended.json").read_text())
    assert ended == {"on_train_end": True, "status": "finished"}
    assert report["status"] == "completed"
    assert report["script_end"] == {"stopped_by_perfdoctor": False, "run_to_end": True}
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert report["removed_outputs"] == [os.path.join("lightning_logs", "version_1")]
