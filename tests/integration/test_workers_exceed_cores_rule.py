"""dataloader-workers-exceed-cores on a real run: a script whose own num_workers is the
usable cores leaves the training process none, and the diagnosis says so."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from test_child_launch import run_child

from perfdoctor.diagnose import diagnose_session

pytestmark = pytest.mark.integration


def usable_cores() -> int:
    """The rule's count: the smaller of physical and logical (affinity) cores."""
    try:
        logical = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS / Windows
        logical = os.cpu_count() or 1
    return min(logical, psutil.cpu_count(logical=False) or logical)


def test_as_many_workers_as_cores_is_found_on_a_real_run(tmp_path: Path) -> None:
    workers = usable_cores()
    run = run_child(tmp_path, "train_loop.py", "--workers", str(workers), "--epochs", "3")
    assert run.returncode == 0, run.output
    diagnosis = diagnose_session(run.run_dir)
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


def test_one_worker_fewer_than_the_cores_passes(tmp_path: Path) -> None:
    workers = usable_cores() - 1
    if workers < 1:
        pytest.skip("one usable core: any worker leaves the training process none")
    run = run_child(tmp_path, "train_loop.py", "--workers", str(workers), "--epochs", "3")
    assert run.returncode == 0, run.output
    diagnosis = diagnose_session(run.run_dir)
    assert diagnosis.facts.get("dataloader_num_workers") == workers
    fired = {f.rule_id for f in diagnosis.findings} | {
        r for f in diagnosis.findings for r in f.related
    }
    assert "dataloader-workers-exceed-cores" not in fired
    assert not any(s.rule_id == "dataloader-workers-exceed-cores" for s in diagnosis.skipped)
