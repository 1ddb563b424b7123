"""batch_plan.py's pure helpers: time per sample for the A/B machinery, the offer of
--plan-batch when a finding asks for a batch change, the decision that makes apply run the
plan on its own, and the budget that bounds it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.batch_plan import (
    AUTO_MIN_BUDGET_S,
    _cap_by_failures,
    _Planner,
    address_space_limit,
    auto_reason,
    mem_available_bytes,
    offer,
    per_sample,
)
from perfdoctor.model import Finding, Target
from perfdoctor.optimize.batch_knob import BatchKnob
from perfdoctor.optimize.estimate import estimate_speedup
from perfdoctor.optimize.verdicts import speed_verdict
from perfdoctor.run_schema import BatchPlan, BatchPlanPoint


def test_per_sample_turns_a_slower_step_into_a_faster_batch() -> None:
    # Batch 64 takes 1.5x the step of batch 32: per sample it is 1.33x faster.
    small = [RunSample("a", (30.0, 31.0, 29.0, 30.0), samples_per_step=32.0) for _ in range(2)]
    large = [RunSample("b", (45.0, 46.0, 44.0, 45.0), samples_per_step=64.0) for _ in range(2)]
    by_step = estimate_speedup(small, large)
    by_sample = estimate_speedup([per_sample(s) for s in small], [per_sample(s) for s in large])
    assert by_step is not None and by_step.speedup < 1
    assert by_sample is not None and abs(by_sample.speedup - 4 / 3) < 0.02
    assert speed_verdict(by_sample, "")[0] == "accepted"


class _Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        self.lines.append(message)


def _finding(rule_id: str, *fixes: str) -> Finding:
    return Finding(
        rule_id=rule_id,
        severity="warning",
        title="t",
        evidence=(),
        explanation="e",
        optimizations=fixes,
    )


def test_offer_only_for_findings_the_plan_addresses() -> None:
    sink = _Notes()
    offer(SimpleNamespace(findings=(_finding("input-bound", "dataloader-workers"),)), sink)  # type: ignore[arg-type]
    assert sink.lines == []
    offer(SimpleNamespace(findings=(_finding("gpu-underused", "larger-batch"),)), sink)  # type: ignore[arg-type]
    assert len(sink.lines) == 1 and "--plan-batch" in sink.lines[0]
    assert sink.lines[0].startswith("gpu-underused")


def _sev(rule_id: str, severity: str, *fixes: str) -> Finding:
    return Finding(
        rule_id=rule_id,
        severity=severity,  # type: ignore[arg-type]
        title="t",
        evidence=(),
        explanation="e",
        optimizations=fixes,
    )


PRESSURE = ("activation-checkpointing", "amp-bf16", "grad-accumulation")
LAUNCH = ("compile-cudagraphs", "compile", "larger-batch")


@pytest.mark.parametrize(
    ("findings", "expected"),
    [
        # Memory capacity as the headline, whatever its severity.
        ([_sev("memory-underused", "info", "larger-batch")], "the headline is about memory"),
        ([_sev("memory-near-capacity", "critical", *PRESSURE)], "the headline is about memory"),
        # A warning further down still counts; an info one further down does not.
        (
            [
                _sev("input-bound", "critical", "dataloader-workers"),
                _sev("allocator-retries", "warning", *PRESSURE),
            ],
            "a warning finding is about memory (allocator-retries)",
        ),
        (
            [
                _sev("input-bound", "critical", "dataloader-workers"),
                _sev("memory-underused", "info", "larger-batch"),
            ],
            None,
        ),
        # A small batch, with the larger batch as the fix it leads with.
        (
            [_sev("gpu-underutilized", "warning", "larger-batch")],
            "the headline recommends a larger batch (gpu-underutilized)",
        ),
        # Launch-bound leads with compile and CUDA graphs: those answer it, not the plan.
        ([_sev("launch-bound", "critical", *LAUNCH)], None),
        # A leak and allocator churn are fixed in the script at any batch.
        ([_sev("memory-growth-host", "critical", "detach-logged-tensors")], None),
        ([_sev("allocator-churn", "warning", "keep-allocator-caching")], None),
        # The busy-machine caveat is not the headline: the finding after it is.
        (
            [_sev("busy-machine", "warning"), _sev("memory-underused", "info", "larger-batch")],
            "the headline is about memory (memory-underused)",
        ),
        ([], None),
    ],
)
def test_auto_reason_runs_the_plan_for_memory_and_batch_findings_only(
    findings: list[Finding], expected: str | None
) -> None:
    reason = auto_reason(findings)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and reason.startswith(expected)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_automatic_plan_stops_before_a_stage_that_would_overrun_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr("perfdoctor.batch_plan.time.monotonic", clock)
    sink = _Notes()
    knob = BatchKnob("argument", 32, "--batch-size", "the script's --batch-size argument")
    planner = _Planner(
        SimpleNamespace(session_dir=Path("."), started=0),  # type: ignore[arg-type]
        sink,
        Target(kind="script", name="train.py"),
        knob,
        on_cuda=False,
        rounds=2,
    )
    planner.budget_s = 100.0
    planner.run_s = [20.0, 20.0, 20.0]  # the fit's three runs
    clock.now += 60.0
    assert planner.afford(1, "the check")  # 60 + 20 <= 100
    clock.now += 20.0
    assert not planner.afford(4, "the paired confirmation")  # 80 + 80 > 100
    assert planner.stopped is not None and "paired confirmation" in planner.stopped
    assert "--plan-batch" in sink.lines[-1]
    # Once stopped, no later stage runs, even a cheap one.
    assert not planner.afford(1, "the ways to make the wanted batch fit")
    # --plan-batch has no budget.
    planner.budget_s, planner.stopped = None, None
    assert planner.afford(100, "anything")


def test_pipeline_runs_the_plan_on_its_own_only_when_the_findings_call_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfdoctor import pipeline
    from perfdoctor.model import RunManifest, StepPlan
    from perfdoctor.session import Session

    calls: list[dict[str, object]] = []
    monkeypatch.setattr("perfdoctor.batch_plan.plan_batch", lambda *a, **kw: calls.append(kw))
    target = Target(kind="script", name="train.py")
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=0, repeat=2, apply=True,
        created_at="",
    )  # fmt: skip
    baseline = RunManifest(
        label="baseline", status="completed", exit_code=0, wall_s=1.0, steps_seen=30,
        step_detection="optimizer",
    )  # fmt: skip
    memory = SimpleNamespace(findings=(_sev("memory-near-capacity", "warning", *PRESSURE),))
    other = SimpleNamespace(findings=(_sev("input-bound", "critical", "dataloader-workers"),))

    def run(plan_batch: bool | None, diagnosis: object) -> _Notes:
        sink = _Notes()
        opts = pipeline.ProfileOptions(
            target=target, cwd=tmp_path, runs_root=tmp_path, plan_batch=plan_batch
        )
        runner = pipeline._Runner(opts, tmp_path, session, sink)  # type: ignore[arg-type]
        pipeline._plan_batch(runner, baseline, diagnosis)  # type: ignore[arg-type]
        return sink

    sink = run(None, memory)
    assert len(calls) == 1
    assert calls[0]["trigger"] == "apply: the headline is about memory (memory-near-capacity)"
    budget = calls[0]["budget_s"]
    assert isinstance(budget, float) and budget >= AUTO_MIN_BUDGET_S
    assert any("--no-plan-batch skips it" in line for line in sink.lines)
    run(False, memory)  # --no-plan-batch
    run(None, other)  # nothing about memory or the batch
    run(None, None)  # --no-apply: no diagnosis
    assert len(calls) == 1
    run(True, other)  # --plan-batch: always, without a budget
    assert len(calls) == 2 and calls[1]["trigger"] == "--plan-batch"
    assert calls[1]["budget_s"] is None


def _planner() -> _Planner:
    knob = BatchKnob("argument", 8, "--batch-size", "the script's --batch-size argument")
    return _Planner(
        SimpleNamespace(session_dir=Path("."), started=0),  # type: ignore[arg-type]
        _Notes(),
        Target(kind="script", name="train.py"),
        knob,
        on_cuda=False,
        rounds=2,
    )


def test_a_failed_check_caps_the_predicted_limit() -> None:
    # The check at batch 32 failed to allocate; the fit still predicted 390 (issue 31).
    planner = _planner()
    plan = BatchPlan(knob="argument", knob_detail="--batch-size", limit_batch=390)
    points = [
        BatchPlanPoint(batch=8, status="completed"),
        BatchPlanPoint(batch=16, status="completed"),
        BatchPlanPoint(batch=32, status="script_crashed", role="verify"),
    ]
    _cap_by_failures(planner, plan, points)
    assert plan.limit_batch == 16
    assert "batch 32 failed to run" in planner.notes[-1]
    # All ran: the prediction stands.
    plan.limit_batch = 390
    _cap_by_failures(planner, plan, points[:2])
    assert plan.limit_batch == 390


def test_the_cpu_limit_is_the_address_space_limit_when_lower(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1 << 30, resource.RLIM_INFINITY))
    assert address_space_limit() == 1 << 30
    assert mem_available_bytes() == 1 << 30  # this machine has more than 1 GiB available
    monkeypatch.setattr(
        resource, "getrlimit", lambda _which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    assert address_space_limit() is None
