"""Re-run rounds in the pipeline: every variant gets rounds up to the engine's first look
(--repeat, at least 3: optimize/engine.py rerun_looks), then an undecided one gets a baseline
run and a run of its own per round until a look decides it, --max-rounds or the budget; the
session records why the rounds stopped. Child runs and verdicts are faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor import pipeline
from perfdoctor.model import RunManifest, StepPlan, Target, VariantResult
from perfdoctor.session import Session, VariantPlan

UNDECIDED = ("undecided", "undecided: 1.25x [0.79x, 1.98x]", 1.25, 0.46)
ACCEPTED = ("accepted", "faster: 1.30x [1.20x, 1.41x]", 1.30, 0.10)


def verdict(label: str, row: tuple) -> VariantResult:
    verdict_, reason, speedup, noise = row
    return VariantResult(
        label=label,
        optimizations=(label,),
        step_ms_p50=None,
        step_ms_p90=None,
        speedup=speedup,
        speedup_noise=noise,
        peak_memory_bytes=None,
        loss_delta=None,
        verdict=verdict_,
        reason=reason,
    )


def make_runner(
    tmp_path: Path, monkeypatch, script: dict[int, tuple], **options
) -> pipeline._Runner:
    """`script`: the verdict of variant "v" after n rounds (the last one for more)."""

    def fake_launch(spec, **_kwargs):
        return RunManifest(
            label=spec.label, status="completed", exit_code=0, wall_s=1.0, steps_seen=3,
            step_detection="optimizer", plan_complete=True,
        )  # fmt: skip

    def fake_verdicts(_session_dir, **_kwargs):
        results = []
        for variant in runner.session.variants:
            rounds = len(variant.runs)
            row = script.get(rounds, script[max(script)])
            results.append(verdict(variant.label, row))
        return results

    monkeypatch.setattr("perfdoctor.collect.launcher.launch", fake_launch)
    monkeypatch.setattr(pipeline.diagnose, "compare_variants", fake_verdicts)
    target = Target(kind="script", name="train.py")
    opts = pipeline.ProfileOptions(
        target=target, cwd=tmp_path, runs_root=tmp_path / "runs", **options
    )
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=0, repeat=opts.repeat,
        apply=True, created_at="", options={"max_rounds": opts.max_rounds},
    )  # fmt: skip
    runner = pipeline._Runner(opts, tmp_path / "runs", session, pipeline.ProgressSink())
    (tmp_path / "runs").mkdir(parents=True, exist_ok=True)
    runner.run("baseline", (), repeat=1, planned_runs=1)
    return runner


def plan_of(runner: pipeline._Runner, label: str) -> VariantPlan:
    return next(v for v in runner.session.variants if v.label == label)


def test_rounds_are_added_until_the_verdict_is_decided(tmp_path, monkeypatch):
    runner = make_runner(
        tmp_path, monkeypatch, {3: UNDECIDED, 4: UNDECIDED, 5: ACCEPTED}, round_budget_s=1e6
    )
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    v = plan_of(runner, "v")
    assert len(v.runs) == 5
    assert v.rounds_stop == "decided after 5 rounds"
    # Each round after the first is a baseline run, then the variant's.
    assert [r.split("/")[0] for r in runner.session.run_order] == [
        "baseline", "v", "baseline", "v", "baseline", "v", "baseline", "v", "baseline", "v",
    ]  # fmt: skip


def test_no_look_before_the_first_look_and_a_decision_there_stops(tmp_path, monkeypatch):
    # Decided-looking verdicts after 1 and 2 rounds are not looked at: 3 pairs at least.
    runner = make_runner(tmp_path, monkeypatch, {1: ACCEPTED, 2: ACCEPTED, 3: ACCEPTED})
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    v = plan_of(runner, "v")
    assert len(v.runs) == 3
    assert v.rounds_stop == "decided after 3 rounds"


def test_rounds_stop_at_max_rounds(tmp_path, monkeypatch):
    runner = make_runner(tmp_path, monkeypatch, {2: UNDECIDED}, max_rounds=4, round_budget_s=1e6)
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    v = plan_of(runner, "v")
    assert len(v.runs) == 4
    assert v.rounds_stop == "still undecided after 4 rounds: --max-rounds 4 reached"


def test_no_round_past_the_budget_or_for_a_decided_variant(tmp_path, monkeypatch):
    runner = make_runner(tmp_path, monkeypatch, {2: UNDECIDED}, round_budget_s=0.0)
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    v = plan_of(runner, "v")
    assert len(v.runs) == 3
    assert v.rounds_stop is not None and "would overrun the 0s budget" in v.rounds_stop

    decided = make_runner(tmp_path / "d", monkeypatch, {2: ACCEPTED})
    decided.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    assert plan_of(decided, "v").rounds_stop == "decided after 3 rounds"
    assert len(plan_of(decided, "v").runs) == 3


@pytest.mark.parametrize("max_rounds", [1, 2])
def test_max_rounds_below_the_first_look_bounds_the_rounds(tmp_path, monkeypatch, max_rounds):
    """--repeat 1 --max-rounds 1 (a test bounding its runs): that many rounds, no look."""
    runner = make_runner(tmp_path, monkeypatch, {1: UNDECIDED}, max_rounds=max_rounds, repeat=1)
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    v = plan_of(runner, "v")
    assert len(v.runs) == max_rounds
    assert v.rounds_stop == (
        f"still undecided after {max_rounds} rounds: --max-rounds {max_rounds} reached"
    )


def test_verdicts_between_rounds_need_no_trace_and_agree(tmp_path):
    """The looks between rounds read no trace; the report's verdicts parse them: the same."""
    import shutil

    from perfdoctor import diagnose
    from perfdoctor.session import save_session

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "tuned_mlp_cpu"
    for rel in ("baseline", "baseline/repeat-2", "v", "v/repeat-2"):
        shutil.copytree(fixture, tmp_path / rel)
    target = Target(kind="script", name="train.py")
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=0, repeat=2, apply=True,
        created_at="", baseline_runs=("baseline", "baseline/repeat-2"),
        variants=(VariantPlan("v", ("fused-optimizer",), runs=("v", "v/repeat-2")),),
        run_order=("baseline", "v", "baseline/repeat-2", "v/repeat-2"),
    )  # fmt: skip
    save_session(tmp_path, session)
    light = diagnose.compare_variants(tmp_path, parse_traces=False)
    assert light == diagnose.compare_variants(tmp_path)
    assert [r.label for r in light] == ["v"]


def test_progress_names_an_extra_round_instead_of_a_growing_total(tmp_path, monkeypatch):
    """Rounds past the first look are added one at a time: "run 7/8, 9/10" would move the
    total on every round, so their runs say which round they are and the most there can be."""
    import io
    import re

    from rich.console import Console

    from perfdoctor.render.progress import PlainSink

    out = io.StringIO()
    runner = make_runner(
        tmp_path, monkeypatch, {3: UNDECIDED, 4: UNDECIDED, 5: ACCEPTED}, round_budget_s=1e6
    )
    runner.sink = PlainSink(Console(file=out, width=200))
    runner.run_ab_rounds([VariantPlan(label="v", optimizations=("v",))])
    lines = [line for line in out.getvalue().splitlines() if line.endswith(" ...")]
    # Rounds past the first look carry the session's expected time left.
    assert all(" · session ~" in line for line in lines[5:])
    started = [re.sub(r" · session ~\d+s left", "", line) for line in lines]
    assert started[:5] == [
        "perfdoctor: run 2/6 v +profiler ...",
        "perfdoctor: run 3/6 baseline #2 ...",
        "perfdoctor: run 4/6 v #2 ...",
        "perfdoctor: run 5/6 baseline #3 ...",
        "perfdoctor: run 6/6 v #3 ...",
    ]
    assert started[5:] == [
        "perfdoctor: extra round 4 of up to 6: run 7 baseline #4 ...",
        "perfdoctor: extra round 4 of up to 6: run 8 v #4 ...",
        "perfdoctor: extra round 5 of up to 6: run 9 baseline #5 ...",
        "perfdoctor: extra round 5 of up to 6: run 10 v #5 ...",
    ]
