"""dataloader-workers-exceed-cores on a real run: a script whose own num_workers is the
usable cores leaves the training process none, and the diagnosis says so.

One real run (workers = usable cores) is recorded per module; the one-fewer case is that run
with its recorded num_workers lowered by one: what differs is the rule's reading, not the
collection (which the real run checks).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import psutil
import pytest
from test_child_launch import ChildRun, run_child

from perfdoctor import rundir
from perfdoctor.diagnose import diagnose_session

pytestmark = pytest.mark.integration


def usable_cores() -> int:
    """The rule's count: the smaller of physical and logical (affinity) cores."""
    try:
        logical = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS / Windows
        logical = os.cpu_count() or 1
    return min(logical, psutil.cpu_count(logical=False) or logical)


@pytest.fixture(scope="module")
def as_many_as_cores(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    run = run_child(
        tmp_path_factory.mktemp("workers"),
        "train_loop.py",
        "--workers",
        str(usable_cores()),
        "--epochs",
        "3",
    )
    assert run.returncode == 0, run.output
    return run


def test_as_many_workers_as_cores_is_found_on_a_real_run(as_many_as_cores: ChildRun) -> None:
    workers = usable_cores()
    diagnosis = diagnose_session(as_many_as_cores.run_dir)
    assert diagnosis.facts.get("dataloader_num_workers") == workers
    found = [
        f
        for f in diagnosis.findings
        if "dataloader-workers-exceed-cores" in (f.rule_id, *f.related)
    ]
    assert len(found) == 1, [f.rule_id for f in diagnosis.findings]
    evidence = {e.name: e for e in found[0].evidence}
    assert evidence["dataloader_num_workers"].value == workers
    assert evidence["dataloader_num_workers"].threshold == workers - 1
    assert "dataloader-workers" in found[0].optimizations


def test_one_worker_fewer_than_the_cores_passes(as_many_as_cores: ChildRun, tmp_path: Path) -> None:
    workers = usable_cores() - 1
    if workers < 1:
        pytest.skip("one usable core: any worker leaves the training process none")
    run_dir = tmp_path / "one-fewer"
    shutil.copytree(as_many_as_cores.run_dir, run_dir)
    observations = run_dir / rundir.OBSERVATIONS_FILE
    recorded = json.loads(observations.read_text())
    for loader in recorded["dataloaders"]:
        loader["num_workers"] = workers
    observations.write_text(json.dumps(recorded))
    diagnosis = diagnose_session(run_dir)
    assert diagnosis.facts.get("dataloader_num_workers") == workers
    fired = {f.rule_id for f in diagnosis.findings} | {
        r for f in diagnosis.findings for r in f.related
    }
    assert "dataloader-workers-exceed-cores" not in fired
    assert not any(s.rule_id == "dataloader-workers-exceed-cores" for s in diagnosis.skipped)
