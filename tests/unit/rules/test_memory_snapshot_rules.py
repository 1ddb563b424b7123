"""Memory rules on what a CUDA memory snapshot says: the allocator's own settings, and the real
snapshots of the GPU corpus seen alone (as `perfdoctor diagnose` sees a pickle) and beside a
GPU's size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdoctor.analyze.memory import (
    analyze_snapshot,
    load_memory,
    memory_peak_locations,
    snapshot_facts,
)
from perfdoctor.model import Facts
from perfdoctor.rules import ALL_RULES, evaluate
from perfdoctor.rules.memory import ALLOCATOR_PRESSURE, FRAGMENTATION, GROWTH_DEVICE, RULES
from tests.unit.rules.factsets import make_facts

GIB = 2**30
H100_BYTES = 85_029_158_912
BY_ID = {rule.id: rule for rule in RULES}


def _run(rule_id: str, **facts: object) -> list:
    return list(evaluate(make_facts("gpu", **facts), rules=(BY_ID[rule_id],)).findings)


def test_no_expandable_segments_advice_when_the_allocator_already_uses_them() -> None:
    tight = {"fragmentation_frac": 0.3, "peak_reserved_bytes": 75 * GIB}
    assert _run(FRAGMENTATION, **tight)  # fires with the setting off or unknown
    assert not _run(FRAGMENTATION, **tight, expandable_segments=True)
    (finding,) = _run(ALLOCATOR_PRESSURE, alloc_retries=3, expandable_segments=True)
    assert "expandable-segments" not in finding.optimizations
    (finding,) = _run(ALLOCATOR_PRESSURE, alloc_retries=3, expandable_segments=False)
    assert "expandable-segments" in finding.optimizations


def _corpus() -> Path | None:
    repo = Path(__file__).resolve().parents[3]
    for candidate in (os.environ.get("PERFDOCTOR_GPU_CORPUS"), repo.parent / "shared/gpu-corpus"):
        if candidate and (Path(candidate) / "snapshots").is_dir():
            return Path(candidate) / "snapshots"
    return None


SNAPSHOTS = _corpus()


@pytest.mark.skipif(SNAPSHOTS is None, reason="gpu-corpus snapshots not present")
@pytest.mark.parametrize("device_total", [None, H100_BYTES])
def test_real_snapshots_give_no_false_memory_finding(device_total: int | None) -> None:
    """One forward or one training step: nothing can be said about growth across steps, the
    peak is below 90% of an 80 GB GPU, and the cache's gaps (at most 10% of reserved) are no
    fragmentation problem."""
    assert SNAPSHOTS is not None
    for path in sorted(SNAPSHOTS.glob("*.pickle")):
        summary = load_memory(path)
        values = {k: v for k, v in snapshot_facts(summary, device_total).items()}
        if device_total is not None:
            values |= {"device_is_cuda": True, "device_total_memory_bytes": device_total}
        facts = Facts(values=values, locations={"memory_peak": memory_peak_locations(summary)})
        results = evaluate(facts, rules=ALL_RULES)
        memory_findings = [f.rule_id for f in results.findings if f.rule_id in BY_ID]
        assert memory_findings == [], (path.name, memory_findings)
        assert GROWTH_DEVICE in {s.rule_id for s in results.skipped}


def test_an_oom_in_a_snapshot_alone_is_reported() -> None:
    """Snapshots are often dumped on an OOM; they carry the oom entry but no retry count."""
    fixture = Path(__file__).parents[1] / "analyze" / "fixtures" / "snapshot_history.pickle"
    analysis = analyze_snapshot(fixture)
    assert analysis.facts["alloc_retries"] is None and analysis.facts["oom_events"] == 1
    facts = Facts(values=analysis.facts, locations=analysis.locations)
    (finding,) = evaluate(facts, rules=(BY_ID[ALLOCATOR_PRESSURE],)).findings
    assert finding.severity == "critical"
    assert [e.name for e in finding.evidence][:1] == ["oom_events"]
    assert finding.locations[0].line == 12
