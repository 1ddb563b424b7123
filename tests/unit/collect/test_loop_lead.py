"""A starting process whose steps are time windows (a Hogwild parent's test loop) does not
lead the run when a started process trained (collect/tree_settle.py)."""

from __future__ import annotations

import json
from pathlib import Path

from perfdoctor import rundir
from perfdoctor.collect.tree_settle import settle


def write_steps(path: Path, steps: int) -> None:
    rows = [{"index": i, "phase": "timed", "wall_ms": 1.0 + i} for i in range(steps)]
    (path / rundir.STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_trainer(run: Path, key: str, pid: int, steps: int) -> None:
    path = run / rundir.PROCS_DIR / key
    path.mkdir(parents=True)
    write_steps(path, steps)
    process = {"pid": pid, "host": "h", "kind": "multiprocessing-spawn", "rank": None}
    process["shared_model"] = True
    obs = {"process": process, "step_detection": "optimizer"}
    rundir.write_json(path / rundir.OBSERVATIONS_FILE, obs)


def test_a_parent_that_only_ran_time_windows_gives_the_lead_to_a_trainer(tmp_path: Path) -> None:
    run = tmp_path
    write_steps(run, 3)
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, {"step_detection": "time", "steps_seen": 3})
    write_trainer(run, "h-40", pid=40, steps=12)
    write_trainer(run, "h-41", pid=41, steps=12)
    warnings = settle(run)
    obs = rundir.read_json(run / rundir.OBSERVATIONS_FILE)
    assert obs["step_detection"] == "optimizer" and obs["process"]["pid"] == 40
    assert obs["starting_process"]["step_detection"] == "time"
    assert obs["starting_process"]["steps_wall_ms"] == 1.0 + 2.0 + 3.0  # its test loop
    assert len(rundir.load_steps(run)) == 12
    listed = rundir.read_json(run / rundir.PROCESSES_FILE)["processes"]
    assert [(p["pid"], p["record"]) for p in listed] == [(40, "."), (41, "ranks/1")]
    (text,) = warnings
    assert "2 Hogwild trainer(s) started with (torch.)multiprocessing (spawn)" in text
    assert text.startswith("the starting process did not train (3 time-window step(s)")
    assert "the lead record is a trainer's; trained in 2 processes" in text


def test_a_parent_that_trained_keeps_the_lead(tmp_path: Path) -> None:
    run = tmp_path
    write_steps(run, 5)
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, {"step_detection": "optimizer"})
    write_trainer(run, "h-50", pid=50, steps=12)
    settle(run)
    listed = rundir.read_json(run / rundir.PROCESSES_FILE)["processes"]
    assert [(p["kind"], p["record"]) for p in listed] == [
        ("perfdoctor-child", "."),
        ("multiprocessing-spawn", "ranks/1"),
    ]
    assert len(rundir.load_steps(run)) == 5
