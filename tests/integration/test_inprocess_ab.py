"""In-process A/B in a real child (collect/ab_switch.py): one A/A run whose arms switch
nothing, and one run that switches anomaly-off between steps of a script that left anomaly
detection on. Behaviour only: which arms ran, what ab.json holds, how the comparison ended;
never a timing (benchmarks/ab_false_verdicts.py and ab_cases.py measure those)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfdoctor.collect.launcher import launch
from perfdoctor.model import ABDesign, Arm, Comparison, RunManifest, RunSpec, StepPlan, Target
from perfdoctor.optimize.inprocess import SCRIPT_ENDED, final_estimate, load_ab_log, pool
from perfdoctor.rundir import AB_FILE, OBSERVATIONS_FILE, STEPS_FILE, read_json, read_jsonl

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# How a comparison may end in the child (optimize/inprocess.py, collect/ab_switch.py).
ENDS = {"faster", "slower", "no-gain", "budget", "max rounds"}
BLOCK_KEYS = {"round", "arm", "first_step", "step_ms", "settle", "arm_warmup"}
# One intra-op thread in every child here: with two on a busy 2-core machine (the suite's
# two workers are enough) each small op waits at a barrier, and anomaly_short.py's ~5 ms
# step took 100-480 ms (22-26 s of wall per 40-step child, 17.6 s of CPU for the two).
# Nothing here reads a timing.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def run_ab(tmp_path: Path, design: ABDesign, optimizations: tuple[str, ...], *args: str):
    spec = RunSpec(
        label="ab",
        target=Target("script", str(SCRIPTS / "train_loop.py"), ("--forever", *args)),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "ab"),
        plan=StepPlan(warmup_steps=3, profiled_steps=0),
        optimizations=optimizations,
        profile=False,
        env=ONE_THREAD,
        ab=design,
    )
    manifest: RunManifest = launch(spec, timeout_s=120, echo_output=False)
    return manifest, tmp_path / "ab"


def arms_of_steps(run_dir: Path) -> set[str | None]:
    return {
        row.get("arm") for row in read_jsonl(run_dir / STEPS_FILE) if row.get("phase") != "warmup"
    }


def test_a_a_run_writes_ab_json_and_switches_nothing(tmp_path: Path) -> None:
    design = ABDesign(
        arms=(Arm("baseline"), Arm("same")),
        comparisons=(Comparison("same", 0, 1),),
        budget_s=1.5,
        seed=7,
    )
    manifest, run_dir = run_ab(tmp_path, design, ())
    assert manifest.status == "completed", manifest
    raw = read_json(run_dir / AB_FILE)
    assert set(raw) >= {
        "design", "block_steps", "rounds", "measure_s", "warmup_blocks_s", "stop_reason",
        "comparisons", "blocks",
    }  # fmt: skip
    assert raw["stop_reason"]
    assert [c["label"] for c in raw["comparisons"]] == ["same"]
    end = raw["comparisons"][0]
    assert end["ended"] in ENDS, end
    assert end["looks"] >= 1
    assert raw["block_steps"] >= 3
    for block in raw["blocks"]:
        assert set(block) == BLOCK_KEYS
        assert block["arm"] in (0, 1)
        assert len(block["step_ms"]) == block["settle"] + raw["block_steps"]
    # Arms that switch nothing costly count from their first block (the warm-up ran the
    # script as it is); every round ran both arms.
    assert not [b for b in raw["blocks"] if b["arm_warmup"]]
    rounds = {b["round"] for b in raw["blocks"]}
    assert rounds == set(range(1, raw["rounds"] + 1))
    for r in rounds:
        assert sorted(b["arm"] for b in raw["blocks"] if b["round"] == r) == [0, 1]

    ab = load_ab_log(run_dir)
    assert ab is not None and ab.rounds == raw["rounds"]
    comparison = ab.comparison("same")
    assert comparison is not None
    est = final_estimate(ab.design, list(ab.blocks), comparison, ab.end_of("same").rounds)
    assert est is not None and est.pairs >= 3 and est.low <= est.speedup <= est.high

    # Nothing is switchable: no applier was installed, and the steps carry both labels only
    # because the controller named the blocks.
    observations = read_json(run_dir / OBSERVATIONS_FILE)
    assert not observations.get("applied")
    assert arms_of_steps(run_dir) <= {"baseline", "same", None}
    assert {"baseline", "same"} <= arms_of_steps(run_dir)


def test_anomaly_off_is_switched_between_steps_and_verified(tmp_path: Path) -> None:
    design = ABDesign(
        arms=(Arm("baseline"), Arm("anomaly-off", ("anomaly-off",))),
        comparisons=(Comparison("anomaly-off", 0, 1),),
        budget_s=1.5,
        seed=3,
    )
    manifest, run_dir = run_ab(tmp_path, design, ("anomaly-off",), "--debug-modes")
    assert manifest.status == "completed", manifest
    raw = read_json(run_dir / AB_FILE)
    end = raw["comparisons"][0]
    assert end["label"] == "anomaly-off"
    assert end["ended"] in ENDS, end
    assert {b["arm"] for b in raw["blocks"]} == {0, 1}
    assert {"baseline", "anomaly-off"} <= arms_of_steps(run_dir)

    applied = {a["id"]: a for a in read_json(run_dir / OBSERVATIONS_FILE)["applied"]}
    assert applied["anomaly-off"]["applied"] is True, applied
    assert applied["anomaly-off"]["verified"] is True, applied


def test_a_script_that_ends_first_is_continued_and_its_pairs_pool(tmp_path: Path) -> None:
    """A 40-step script ends before any look: the comparison ends "script ended" with no
    look taken; a second child started with the first named in its design pools its pairs
    after the first's (optimize/engine.py), whatever the timings say."""
    design = ABDesign(
        arms=(Arm("baseline"), Arm("anomaly-off", ("anomaly-off",))),
        comparisons=(Comparison("anomaly-off", 0, 1),),
        block_steps=3,
        budget_s=30.0,
        seed=5,
    )
    runs = []
    for k in (1, 2):
        spec = RunSpec(
            label="ab",
            target=Target("script", str(SCRIPTS / "anomaly_short.py"), ("--steps", "40")),
            cwd=str(tmp_path),
            run_dir=str(tmp_path / f"ab{k}"),
            plan=StepPlan(warmup_steps=3, profiled_steps=0),
            optimizations=("anomaly-off",),
            profile=False,
            env=ONE_THREAD,
            ab=replace(design, prior_runs=tuple(str(r) for r in runs)),
        )
        manifest = launch(spec, timeout_s=120, echo_output=False)
        assert manifest.status == "finished_early", manifest
        runs.append(tmp_path / f"ab{k}")
    logs = [load_ab_log(r) for r in runs]
    assert all(log is not None for log in logs)
    first, second = logs
    assert first.end_of("anomaly-off").ended == SCRIPT_ENDED
    assert first.end_of("anomaly-off").looks == 0
    assert second.design.prior_runs == (str(runs[0]),)
    pooled = pool(logs, "anomaly-off")
    alone = pool(logs[:1], "anomaly-off")
    assert pooled is not None and alone is not None
    assert pooled.processes == 2
    assert len(pooled.pairs) > len(alone.pairs) >= 1
    assert {p.process for p in pooled.pairs} == {0, 1}


def test_dataloader_workers_switch_between_two_iterators_in_one_process(tmp_path: Path) -> None:
    """dataloader-workers in one process: the script's loader stays as built (in-process
    loading) and a persistent twin over the same dataset, with workers, feeds the fix's
    blocks; the epoch still ends after the script's own number of batches."""
    design = ABDesign(
        arms=(Arm("baseline"), Arm("dataloader-workers", ("dataloader-workers",))),
        comparisons=(Comparison("dataloader-workers", 0, 1),),
        block_steps=8,
        settle_steps=3,
        budget_s=30.0,
        statistic="throughput-windows",
        seed=2,
    )
    spec = RunSpec(
        label="ab",
        target=Target(
            "script", str(SCRIPTS / "bursty_loader.py"), ("--batches", "80", "--item-ms", "0.1")
        ),
        cwd=str(tmp_path),
        run_dir=str(tmp_path / "ab"),
        plan=StepPlan(warmup_steps=3, profiled_steps=0),
        optimizations=("dataloader-workers",),
        profile=False,
        env={"PERFDOCTOR_DATALOADER_WORKERS": "1", **ONE_THREAD},
        ab=design,
    )
    manifest = launch(spec, timeout_s=180, echo_output=False)
    # The script's one epoch of 80 batches ends the run, whichever iterator fed them.
    assert manifest.status == "finished_early", manifest
    assert manifest.steps_seen == 80
    log = load_ab_log(tmp_path / "ab")
    assert log is not None and {b.arm for b in log.blocks} == {0, 1}
    assert all(len(b.step_ms) == 3 + 8 for b in log.blocks[:-1])
    applied = {a["id"]: a for a in read_json(tmp_path / "ab" / OBSERVATIONS_FILE)["applied"]}
    worker = applied["dataloader-workers"]
    assert worker["applied"] is True and "twin" in worker["detail"], worker
    assert worker["verified"] is True, worker
