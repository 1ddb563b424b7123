"""The whole loop: heavy work between optimizer steps (a rollout, an evaluation with a
checkpoint) is measured and flagged when the timed steps miss it; a Hogwild parent that only
tests does not lead; an LBFGS run's step counts agree.

The rollout and LBFGS runs are real child runs (what the probes and the stack sampler
collect); the evaluation and Hogwild runs are recorded ones (tests/fixtures/integration_runs,
tools/record_fixture.py), whose tests read only what the analysis makes of the records (the
Hogwild collect side: tests/integration/test_process_tree.py and
tests/unit/collect/test_loop_lead.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import profile_in_process
from recorded_runs import recorded_report

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts"
# Warm-up 0-1, timed 2-7, profiler start-up 8, profiled 9-10: with --every 8 the heavy work
# lands in steps 0 and 8, both outside the timed window.
PLAN = ["--warmup", "2", "--steps", "6", "--profile-steps", "2", "--no-apply"]
WAIT_S = "180"
# One intra-op thread (periodic_work.py sets it itself): with two on a busy 2-core machine
# (the suite's two workers are enough) each small op waits at a barrier, as in the Hogwild
# parent's 3,125 test batches.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def profile(tmp: Path, script: str, *args: str) -> dict[str, Any]:
    runs = tmp / "runs"
    proc = profile_in_process(
        "--out", runs, "--timeout", WAIT_S, *PLAN, SCRIPTS / script, *args, cwd=tmp,
        env=ONE_THREAD,
    )  # fmt: skip
    session = (runs / "latest").resolve()
    assert (session / "report.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {
        "proc": proc,
        "session": session,
        "report": json.loads((session / "report.json").read_text()),
        "md": (session / "report.md").read_text(),
    }


def test_a_rollout_every_8_steps_is_measured_and_flagged(tmp_path: Path) -> None:
    run = profile(tmp_path, "periodic_work.py", "--mode", "rollout", "--every", "8")
    loop = run["report"]["loop"]
    assert [s["index"] for s in loop["long_steps"]] == [0, 8], loop
    assert loop["period"] == 8 and loop["representative"] is False
    assert loop["costs_ms"]["nograd_forward_ms"] > 0 and loop["costs_ms"]["other_ms"] > 0
    assert "eval_forward_ms" not in loop["costs_ms"]
    assert any("do not represent the loop" in w for w in run["report"]["warnings"])
    assert "## Where the loop's time goes" in run["md"]
    assert "loop-work-outside-steps" in [f["rule_id"] for f in run["report"]["findings"]]
    # Issue 32: the stack sampler names the script's own code in the long steps (step 0:
    # step 8 is the profiler's start-up, where the sampler stops), and every step row has
    # the stepping thread's CPU time.
    code = loop["long_code"]
    assert code and code[0]["file"].endswith("periodic_work.py"), loop
    assert code[0]["function"] in ("environment_step", "main"), code
    rows = [
        json.loads(line)
        for line in (run["session"] / "baseline" / "steps.jsonl").read_text().splitlines()
    ]
    assert rows and all(isinstance(r.get("cpu_ms"), float) for r in rows)


def test_an_evaluation_and_checkpoint_every_8_steps_are_named() -> None:
    # Recorded as `profile` runs it here (PLAN, one thread): `--mode eval --every 8`.
    run = recorded_report("periodic_eval_cpu")
    loop = run["report"]["loop"]
    assert [s["index"] for s in loop["long_steps"]] == [0, 8], loop
    assert loop["costs_ms"]["eval_forward_ms"] > 0 and loop["costs_ms"]["save_ms"] > 0
    assert "nograd_forward_ms" not in loop["costs_ms"]
    assert loop["representative"] is False


def test_a_hogwild_parent_that_only_tests_does_not_lead() -> None:
    # Recorded as `profile` runs it here (PLAN, one thread): `--test-rows 200000`; the
    # parent and its two spawned trainers imported torch (and dynamo) each, about 20 s of
    # CPU a suite run for a test of what the analysis makes of their records.
    run = recorded_report("hogwild_test_loop_cpu")
    report = run["report"]
    assert report["exit_code"] == 0 and report["status"] == "completed", report["warnings"]
    listed = json.loads((run["run"] / "processes.json").read_text())
    lead = listed["processes"][0]
    assert lead["record"] == "." and lead["kind"] == "multiprocessing-spawn", listed
    assert report["baseline"]["step_detection"] == "optimizer"
    assert report["baseline"]["optimizer_steps"] > 0
    assert not any("--nproc-per-node" in w for w in report["warnings"])
    assert any("Hogwild trainer(s)" in w and "did not train" in w for w in report["warnings"])
    # The parent's test loop is named in the loop account, apart from the lead's loop.
    assert report["loop"]["costs_ms"]["starting_process_ms"] > 0
    assert "the starting process's forwards, no training (a test loop)" in run["md"]


def test_lbfgs_step_counts_agree(tmp_path: Path) -> None:
    run = profile(tmp_path, "lbfgs.py", "--steps", "3")
    base = run["report"]["baseline"]
    assert base["closure_steps"] >= 11  # every planned step was a closure call
    assert base["optimizer_steps"] < base["closure_steps"]
    assert "closure calls inside optimizer.step(closure)" in run["md"]
