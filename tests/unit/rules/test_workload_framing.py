"""Findings framed for an inference trace (issue 22 part 6), on facts alone."""

from __future__ import annotations

from perfdoctor.rules import ALL_RULES, evaluate

from .factsets import make_facts

RULES = {r.id: r for r in ALL_RULES}

INFERENCE = {
    "workload_kind": "inference",
    "workload_kind_evidence": "no backward ops and no optimizer step; KV cache",
}


def test_memory_underused_drops_its_learning_rate_sentence_for_inference() -> None:
    facts = make_facts("gpu", peak_allocated_frac=0.05, gpu_busy_frac=0.4, **INFERENCE)
    findings = {f.rule_id: f for f in evaluate(facts, rules=[RULES["memory-underused"]]).findings}
    assert findings
    texts = " ".join(f.explanation for f in findings.values())
    assert "learning rate" not in texts
    assert "inference trace" in texts
    for f in findings.values():
        assert "larger-batch" not in f.optimizations


def test_training_keeps_the_learning_rate_advice() -> None:
    facts = make_facts("gpu", peak_allocated_frac=0.05, gpu_busy_frac=0.4)
    rules = [RULES["memory-underused"]]
    texts = " ".join(f.explanation for f in evaluate(facts, rules=rules).findings)
    assert "learning rate" in texts


def test_optimizer_findings_are_dropped_for_inference() -> None:
    training = make_facts("cpu", optimizer_impl="single-tensor", optimizer_frac=0.2)
    inference = make_facts("cpu", optimizer_impl="single-tensor", optimizer_frac=0.2, **INFERENCE)
    areas = {r.id: r.area for r in ALL_RULES}
    fired = {f.rule_id for f in evaluate(training).findings}
    assert any(areas.get(i) == "optimizer" for i in fired)
    kept = {f.rule_id for f in evaluate(inference).findings}
    assert not any(areas.get(i) == "optimizer" for i in kept)
