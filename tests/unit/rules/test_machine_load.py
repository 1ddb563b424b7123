"""Advice that fits the machine (issue 24 item 3): on a busy machine a CPU-side finding says
its shares are distorted, is not critical, and never advises taking more cores."""

from __future__ import annotations

from perfdoctor.model import Scalar
from perfdoctor.optimize.recommend import recommend
from perfdoctor.rules import evaluate

from .factsets import make_facts

# Measured on this shared 2-core machine while the scripts ran: 1.5-1.9 other cores.
BUSY: dict[str, Scalar] = {"cpu_other_busy_cores": 1.6, "cpu_cores_logical": 2}
QUIET: dict[str, Scalar] = {"cpu_other_busy_cores": 0.1, "cpu_cores_logical": 2}


def _finding(rule_id: str, **facts: Scalar):  # type: ignore[no-untyped-def]
    found = {f.rule_id: f for f in evaluate(make_facts("cpu", **facts)).findings}
    for finding in found.values():
        if rule_id in (finding.rule_id, *finding.related):
            return finding
    return None


def test_threads_below_cores_on_a_quiet_machine_advises_more_threads() -> None:
    finding = _finding("cpu-threads-below-cores", torch_num_threads=1, **QUIET)
    assert finding is not None and finding.optimizations == ("cpu-threads",)
    assert "set_num_threads(2)" in finding.explanation


def test_threads_below_cores_on_a_busy_machine_takes_no_cores() -> None:
    finding = _finding("cpu-threads-below-cores", torch_num_threads=1, **BUSY)
    assert finding is not None
    assert finding.severity == "info"
    assert finding.optimizations == ()
    assert "1.6 of 2 cores busy" in finding.title
    facts = make_facts("cpu", torch_num_threads=1, **BUSY)
    recs = recommend(evaluate(facts).findings, facts)
    assert "cpu-threads" not in {r.optimization_id for r in recs}


def test_input_bound_with_starved_workers_advises_no_more_workers() -> None:
    finding = _finding("input-bound", data_wait_frac=0.44, dataloader_num_workers=2, **BUSY)
    assert finding is not None
    assert finding.severity == "warning"  # 44% would be critical on a quiet machine
    assert "dataloader-workers" not in finding.optimizations
    assert "faster-data-pipeline" not in finding.optimizations
    assert "distorted" in finding.explanation
    assert any(e.name == "cpu_other_busy_cores" for e in finding.evidence)


def test_input_bound_on_a_quiet_machine_keeps_its_advice() -> None:
    finding = _finding("input-bound", data_wait_frac=0.44, dataloader_num_workers=0, **QUIET)
    assert finding is not None and finding.severity == "critical"
    assert "dataloader-workers" in finding.optimizations


def test_other_cpu_side_findings_carry_the_caveat_once() -> None:
    facts: dict[str, Scalar] = {"optimizer_impl": "single-tensor", "optimizer_frac": 0.5}
    quiet = _finding("single-tensor-optimizer", **facts, **QUIET)
    busy = _finding("single-tensor-optimizer", **facts, **BUSY)
    assert quiet is not None and busy is not None
    assert quiet.severity == "critical" and "distorted" not in quiet.explanation
    assert busy.severity == "warning"
    assert busy.explanation.startswith(quiet.explanation)
    assert busy.explanation.count("distorted") == 1
    assert [e.name for e in busy.evidence].count("cpu_other_busy_cores") == 1


def test_the_busy_machine_finding_itself_is_not_qualified() -> None:
    finding = _finding("busy-machine", **BUSY)
    assert finding is not None and "distorted" not in finding.explanation


def test_a_rule_that_names_the_load_itself_is_not_told_twice() -> None:
    finding = _finding("step-jitter", step_jitter_ratio=3.0, steps_timed=20, **BUSY)
    assert finding is not None
    assert finding.explanation.count("busy-machine") == 1


def test_collectives_of_cpu_ranks_on_a_busy_machine_are_qualified() -> None:
    facts: dict[str, Scalar] = {
        "uses_ddp": True,
        "world_size": 2,
        "ranks_launched": 2,
        "comm_frac": 0.45,
    }
    quiet = evaluate(make_facts("cpu", **facts, **QUIET)).findings
    busy = evaluate(make_facts("cpu", **facts, **BUSY)).findings
    heavy_quiet = [f for f in quiet if f.rule_id == "communication-heavy"]
    heavy_busy = [f for f in busy if f.rule_id == "communication-heavy"]
    assert heavy_quiet[0].severity == "critical"
    assert heavy_busy[0].severity != "critical" and "distorted" in heavy_busy[0].explanation
