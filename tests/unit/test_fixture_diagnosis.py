"""The diagnosis over real recorded runs (tests/fixtures/runs, recorded by
tools/record_fixture.py): each sample model's known inefficiency is found, and the
well-tuned sample gives no warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.optimize.recommend import recommend
from perfdoctor.rules import evaluate

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"

EXPECTED = {
    "cnn_slow_dataloader_cpu": {"input-bound"},
    "tabular_mlp_debug_cpu": {"anomaly-detection-on", "grad-without-backward"},
    "gpt_char_lm_cpu": {"cpu-threads-below-cores"},
}
# Recorded while other processes kept 1.0 of the 2 cores busy: the idle core the threads
# finding points at was theirs, so it is information with no change to try (machine_load.py).
BUSY_RECORDINGS = {"gpt_char_lm_cpu"}


def _diagnose(name: str):
    facts = derive_facts(load_run(RUNS / name))
    return facts, evaluate(facts)


def _all_rule_ids(results) -> set[str]:
    ids = set()
    for finding in results.findings:
        ids.add(finding.rule_id)
        ids.update(finding.related)
    return ids


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_known_inefficiency_is_found(name: str) -> None:
    facts, results = _diagnose(name)
    assert EXPECTED[name] <= _all_rule_ids(results)
    for finding in results.findings:
        if finding.rule_id in EXPECTED[name]:
            busy = name in BUSY_RECORDINGS
            assert finding.severity in (("info",) if busy else ("warning", "critical"))
            assert finding.evidence, finding.rule_id
    # Every finding that names a fix leads to a recommendation.
    recommended = {r.optimization_id for r in recommend(results.findings, facts)}
    assert recommended or name in BUSY_RECORDINGS


def test_a_busy_recording_takes_no_more_threads() -> None:
    facts, results = _diagnose("gpt_char_lm_cpu")
    assert (facts.get("cpu_other_busy_cores") or 0) >= 0.5
    threads = next(f for f in results.findings if f.rule_id == "cpu-threads-below-cores")
    assert threads.optimizations == () and "other processes" in threads.title
    recommended = {r.optimization_id for r in recommend(results.findings, facts)}
    assert "cpu-threads" not in recommended


def test_input_bound_points_at_the_datasets_own_lines() -> None:
    _, results = _diagnose("cnn_slow_dataloader_cpu")
    finding = next(f for f in results.findings if f.rule_id == "input-bound")
    files = {Path(loc.file).name for loc in finding.locations}
    assert "cnn_slow_dataloader.py" in files
    assert "dataloader-workers" in finding.optimizations


def test_eval_without_no_grad_names_the_evaluate_function() -> None:
    _, results = _diagnose("tabular_mlp_debug_cpu")
    ids = {f.rule_id: f for f in results.findings}
    finding = ids.get("grad-without-backward") or next(
        f for f in results.findings if "grad-without-backward" in f.related
    )
    assert any(loc.function == "evaluate" for loc in finding.locations)


def test_tuned_sample_gives_no_warning() -> None:
    _, results = _diagnose("tuned_mlp_cpu")
    loud = [f.rule_id for f in results.findings if f.severity in ("warning", "critical")]
    assert loud == []
