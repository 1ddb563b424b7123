"""evaluate(): well-tuned runs stay quiet, skips say why, one root cause gives one headline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfdoctor.model import Finding, SourceLocation
from perfdoctor.rules import ALL_RULES, evaluate
from perfdoctor.rules.base import Rule
from perfdoctor.rules.engine import missing_reason

from .factsets import make_facts

ALARMS = ("warning", "critical")


@pytest.mark.parametrize("base", ["cpu", "gpu", "gpu_cnn"])
def test_well_tuned_runs_give_no_warning(base: str) -> None:
    results = evaluate(make_facts(base))
    alarms = [(f.rule_id, f.severity, f.title) for f in results.findings if f.severity in ALARMS]
    assert alarms == []
    # Every rule is accounted for once: passed, skipped with a reason, or in a finding.
    fired = sum(1 + len(f.related) for f in results.findings)
    assert len(results.passed) + len(results.skipped) + fired == len(ALL_RULES)


def test_cpu_run_skips_gpu_rules_saying_why() -> None:
    results = evaluate(make_facts("cpu"))
    reasons = {s.rule_id: s.reason for s in results.skipped}
    assert reasons["gpu-underutilized"] == "applies to CUDA training; this run trained on the CPU"
    assert "channels-last" in reasons
    assert "cpu-threads-below-cores" not in reasons
    assert all(reason for reason in reasons.values())
    # On a tuned CPU run only scope (device, multi-rank) skips rules: every CPU-side fact
    # was there.
    assert [r for r in reasons.values() if "CUDA" not in r and "multi-rank" not in r] == []
    assert reasons["rank-straggler"].startswith("applies to multi-rank runs")


def test_gpu_run_skips_cpu_rules() -> None:
    reasons = {s.rule_id: s.reason for s in evaluate(make_facts("gpu")).skipped}
    assert reasons["cpu-threads-below-cores"].startswith("applies to CPU training")


def test_missing_reasons_name_the_cause() -> None:
    cpu = make_facts("cpu")
    assert missing_reason(cpu, "gpu_busy_frac") == "not measured on a CPU run"
    no_trace = make_facts("gpu", trace_steps=None, host_syncs_per_step=None)
    results = evaluate(no_trace, rules=[r for r in ALL_RULES if r.id == "host-syncs"])
    assert results.skipped[0].reason == ("needs host_syncs_per_step: no profiler trace in this run")
    snapshotless = make_facts("gpu", peak_allocated_frac=None)
    assert missing_reason(snapshotless, "peak_allocated_frac") == (
        "no CUDA memory snapshot was read"
    )


def test_input_bound_carries_settings_and_source_lines() -> None:
    lines = (
        SourceLocation("train.py", 41, "__getitem__", share=0.7),
        SourceLocation("train.py", 55, "collate", share=0.2),
    )
    built = (SourceLocation("train.py", 90, "main"),)
    facts = make_facts(
        "gpu",
        locations={"data_loading": lines, "dataloader_construct": built},
        data_wait_frac=0.4,
        data_wait_ms_p50=34.0,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )
    (finding,) = [f for f in evaluate(facts).findings if f.rule_id == "input-bound"]
    assert finding.locations == (*lines, *built)
    assert "train.py:41" in finding.explanation
    assert "built at train.py:90" in finding.explanation
    names = {e.name for e in finding.evidence}
    assert {"data_wait_frac", "dataloader_num_workers", "dataloader_pin_memory"} <= names
    assert finding.optimizations[:2] == ("dataloader-workers", "pin-memory")
    assert finding.gain.step_time_frac == pytest.approx(0.4)


def test_input_bound_with_saturated_cpu_does_not_advise_more_workers() -> None:
    cores = {"cpu_cores_logical": 8, "cpu_cores_physical": 8}
    facts = make_facts(
        "cpu", data_wait_frac=0.3, dataloader_num_workers=2, cpu_util_mean_frac=0.95, **cores
    )
    (finding,) = [f for f in evaluate(facts).findings if f.rule_id == "input-bound"]
    assert finding.optimizations == ("faster-data-pipeline",)
    # 2 workers on 2 cores: fewer (the hand-off), not cheaper data code.
    facts = make_facts("cpu", data_wait_frac=0.3, dataloader_num_workers=2, cpu_util_mean_frac=0.95)
    (finding,) = [f for f in evaluate(facts).findings if f.rule_id == "input-bound"]
    assert finding.optimizations == ("dataloader-workers",)
    assert "num_workers=0" in finding.explanation


def test_input_bound_without_workers_advises_workers_even_on_a_busy_cpu() -> None:
    # With num_workers=0 the busy CPU is the training itself: workers still overlap loading.
    facts = make_facts(
        "cpu",
        data_wait_frac=0.3,
        data_wait_ms_p50=3.6,  # 30% of the 12 ms step: more than a worker's hand-off
        dataloader_num_workers=0,
        cpu_util_mean_frac=0.98,
    )
    (finding,) = [f for f in evaluate(facts).findings if f.rule_id == "input-bound"]
    assert finding.optimizations == ("dataloader-workers", "faster-data-pipeline")


def test_gpu_idle_from_input_merges_into_one_headline() -> None:
    facts = make_facts("gpu", data_wait_frac=0.4, gpu_busy_frac=0.35, dataloader_num_workers=0)
    findings = evaluate(facts).findings
    merged = [f for f in findings if {"input-bound", "gpu-underutilized"} & {f.rule_id, *f.related}]
    assert len(merged) == 1
    head = merged[0]
    assert head.rule_id == "input-bound"
    assert head.related == ("gpu-underutilized",)
    assert {"data_wait_frac", "gpu_busy_frac"} <= {e.name for e in head.evidence}
    assert "Same root cause" in head.explanation


def test_gpu_underutilized_names_launch_overhead_when_that_dominates() -> None:
    facts = make_facts("gpu", gpu_busy_frac=0.45, gpu_idle_host_wait_frac=0.4, kernel_us_p50=6.0)
    findings = evaluate(facts).findings
    (head,) = [f for f in findings if "gpu-underutilized" in (f.rule_id, *f.related)]
    assert head.rule_id == "launch-bound"
    assert "gpu-underutilized" in head.related


def test_gpu_underutilized_by_the_traces_tail_promises_no_fix() -> None:
    """Idle time after the last op with no host work recorded names no cause to remove: the
    finding says so, with no optimization and no gain, and merges into no other rule."""
    facts = make_facts(
        "gpu",
        gpu_busy_frac=0.01,
        gpu_idle_host_wait_frac=0.99,
        gpu_idle_host_busy_frac=0.01,
        gpu_idle_host_sync_frac=0.001,
        gpu_idle_host_unrecorded_frac=0.97,
    )
    (head,) = [f for f in evaluate(facts).findings if f.rule_id == "gpu-underutilized"]
    assert "tail" in head.title
    assert head.optimizations == () and head.related == ()
    assert head.gain is not None and head.gain.step_time_frac is None
    assert "gpu_idle_host_unrecorded_frac" in {e.name for e in head.evidence}
    # 1% busy is critical when a measured cause explains it; a tail is a caveat on the span.
    assert head.severity == "warning"


def test_debug_modes_merge_into_one_finding() -> None:
    facts = make_facts(
        "cpu", anomaly_detection_enabled=True, user_profiler_active=True, emit_nvtx_enabled=True
    )
    findings = evaluate(facts).findings
    debug = [
        f
        for f in findings
        if f.rule_id in ("anomaly-detection-on", "user-profiler-on", "emit-nvtx-on")
    ]
    assert len(debug) == 1
    ids = {debug[0].rule_id, *debug[0].related}
    assert ids == {"anomaly-detection-on", "user-profiler-on", "emit-nvtx-on"}
    assert {"anomaly-off", "debug-modes-off"} <= set(debug[0].optimizations)


def test_ranking_puts_critical_first_then_larger_gain() -> None:
    facts = make_facts(
        "gpu",
        autocast_dtype="float16",  # critical, no time gain
        data_wait_frac=0.12,  # warning, gain 0.12
        dataloader_num_workers=0,
        zero_grad_set_to_none=False,  # info
        optimizer_impl="single-tensor",
        optimizer_frac=0.2,  # warning, gain 0.10
        gpu_busy_frac=0.8,  # neither under-utilized nor GPU-bound
    )
    order = [f.rule_id for f in evaluate(facts).findings]
    assert order == [
        "fp16-without-grad-scaler",
        "input-bound",
        "single-tensor-optimizer",
        "zero-grad-zeroing",
    ]


def test_memory_pressure_names_the_checkpointing_trade() -> None:
    facts = make_facts("gpu", peak_allocated_frac=0.96, alloc_retries=4)
    findings = evaluate(facts).findings
    (head,) = [f for f in findings if f.rule_id in ("memory-near-capacity", "allocator-retries")]
    assert set(head.related) <= {"memory-near-capacity", "allocator-retries"}
    assert head.related
    assert "activation-checkpointing" in head.optimizations
    assert "recomputes" in head.explanation
    assert head.gain.memory_bytes and head.gain.memory_bytes > 0


def test_overrides_replace_named_thresholds() -> None:
    facts = make_facts("cpu", data_wait_frac=0.3)
    assert any(f.rule_id == "input-bound" for f in evaluate(facts).findings)
    quiet = evaluate(facts, overrides={"input-bound": {"warning_frac": 0.5}})
    assert not any(f.rule_id == "input-bound" for f in quiet.findings)


def _rule(check, selects: bool = True) -> Rule:  # type: ignore[no-untyped-def]
    return Rule(
        id="test-rule",
        title="t",
        area="debug",
        needs=("steps_timed",),
        thresholds={},
        source="test",
        description="test",
        check=check,
        optimizations=("anomaly-off", "debug-modes-off"),
        selects_optimizations=selects,
    )


def _finding(rule_id: str = "test-rule", optimizations: tuple[str, ...] = ()) -> Finding:
    return Finding(rule_id, "warning", "t", "e", (), optimizations=optimizations)


def test_a_broken_rule_is_skipped_not_fatal() -> None:
    def boom(facts, t):  # type: ignore[no-untyped-def]
        raise KeyError("threshold")

    results = evaluate(make_facts("cpu"), rules=(_rule(boom),))
    assert results.findings == ()
    assert results.skipped[0].reason.startswith("internal error: KeyError")


@pytest.mark.parametrize(
    "finding",
    [_finding(rule_id="other-rule"), _finding(optimizations=("compile",))],
    ids=["wrong-rule-id", "undeclared-optimization"],
)
def test_findings_must_match_their_rule(finding: Finding) -> None:
    results = evaluate(make_facts("cpu"), rules=(_rule(lambda facts, t: finding),))
    assert results.findings == ()
    assert "internal error" in results.skipped[0].reason


def test_declared_finding_passes_through_unchanged() -> None:
    finding = _finding(optimizations=("anomaly-off",))
    results = evaluate(make_facts("cpu"), rules=(_rule(lambda facts, t: finding),))
    assert results.findings == (replace(finding, related=()),)


def test_a_rule_that_does_not_select_gives_every_finding_its_declared_optimizations() -> None:
    results = evaluate(make_facts("cpu"), rules=(_rule(lambda f, t: _finding(), selects=False),))
    assert results.findings[0].optimizations == ("anomaly-off", "debug-modes-off")


def test_a_check_repeating_the_rules_optimizations_is_refused() -> None:
    repeats = _finding(optimizations=("anomaly-off", "debug-modes-off"))
    results = evaluate(make_facts("cpu"), rules=(_rule(lambda f, t: repeats, selects=False),))
    assert results.findings == ()
    assert "declare them on the Rule" in results.skipped[0].reason
