"""The pipeline's in-process A/B: which fixes it measures in one process, the design it asks
the child for (singles; the stack and its peels), and the seeded runs it adds for the fixes
that came out faster. Child runs and verdicts are faked."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from perfdoctor import pipeline
from perfdoctor.model import RunManifest, StepPlan, Target, VariantResult
from perfdoctor.session import Session


def result(label: str, reason: str) -> VariantResult:
    return VariantResult(
        label=label,
        optimizations=(label,),
        step_ms_p50=None,
        step_ms_p90=None,
        speedup=None,
        speedup_noise=None,
        peak_memory_bytes=None,
        loss_delta=None,
        verdict="accepted" if reason.startswith("faster") else "rejected",
        reason=reason,
    )


def make_runner(tmp_path: Path, monkeypatch, reasons: dict[str, str]):
    specs = []

    def fake_launch(spec, **_kwargs):
        specs.append(spec)
        return RunManifest(
            label=spec.label, status="completed", exit_code=0, wall_s=1.0, steps_seen=30,
            step_detection="optimizer", plan_complete=True,
        )  # fmt: skip

    def fake_verdicts(_session_dir, **_kwargs):
        return [result(v.label, reasons.get(v.label, "no gain")) for v in runner.session.variants]

    monkeypatch.setattr("perfdoctor.collect.launcher.launch", fake_launch)
    monkeypatch.setattr(pipeline.diagnose, "compare_variants", fake_verdicts)
    target = Target(kind="script", name="train.py")
    opts = pipeline.ProfileOptions(
        target=target, cwd=tmp_path, runs_root=tmp_path / "runs", ab_budget_s=12.0, seed=3
    )
    session = Session(
        target=target, cwd=str(tmp_path), plan=StepPlan(), seed=3, repeat=2, apply=True,
        created_at="",
    )  # fmt: skip
    runner = pipeline._Runner(opts, tmp_path / "runs", session, pipeline.ProgressSink())
    (tmp_path / "runs").mkdir(parents=True, exist_ok=True)
    return runner, specs


def test_singles_run_in_one_child_and_only_faster_fixes_get_a_seeded_run(
    tmp_path, monkeypatch
) -> None:
    runner, specs = make_runner(tmp_path, monkeypatch, {"anomaly-off": "faster: 2x"})
    runner.run_in_process(["anomaly-off", "cpu-threads"])
    ab = specs[0]
    assert ab.label == "ab" and ab.profile is False
    assert ab.ab is not None and ab.ab.budget_s == 12.0 and ab.ab.seed == 3
    assert [a.optimizations for a in ab.ab.arms] == [(), ("anomaly-off",), ("cpu-threads",)]
    assert [(c.label, c.reference, c.test) for c in ab.ab.comparisons] == [
        ("anomaly-off", 0, 1),
        ("cpu-threads", 0, 2),
    ]
    assert set(ab.optimizations) == {"anomaly-off", "cpu-threads"}
    # The seeded run: profiled, the standard plan, the fix alone.
    assert [(s.label, s.optimizations, s.profile, s.ab) for s in specs[1:]] == [
        ("anomaly-off", ("anomaly-off",), True, None)
    ]
    plans = {v.label: v for v in runner.session.variants}
    assert plans["anomaly-off"].method == "in-process" and plans["anomaly-off"].ab_run == "ab"
    assert plans["anomaly-off"].runs == ("anomaly-off",)
    assert plans["cpu-threads"].runs == ()


def test_the_stack_is_measured_with_each_fix_peeled_off(tmp_path, monkeypatch) -> None:
    runner, specs = make_runner(tmp_path, monkeypatch, {"stacked": "faster: 2x"})
    runner.run_in_process(["a", "b"], stack=True)
    design = specs[0].ab
    assert specs[0].label == "ab-stack"
    assert [(a.label, a.optimizations) for a in design.arms] == [
        ("baseline", ()),
        ("stacked", ("a", "b")),
        ("stacked-without-a", ("b",)),
        ("stacked-without-b", ("a",)),
    ]
    # The stack against the baseline; the stack against the stack without each fix.
    assert [(c.label, c.reference, c.test) for c in design.comparisons] == [
        ("stacked", 0, 1),
        ("a-in-stack", 2, 1),
        ("b-in-stack", 3, 1),
    ]
    plans = {v.label: v for v in runner.session.variants}
    assert plans["a-in-stack"].peel_of == "a" and plans["stacked"].peel_of is None
    assert [s.label for s in specs[1:]] == ["stacked"]  # the stack's seeded run only


def test_which_candidates_are_measured_in_one_process(tmp_path) -> None:
    record = SimpleNamespace(ranks_launched=1, ranks=())
    diagnosis = SimpleNamespace(record=record)
    target = Target(kind="script", name="train.py")
    options = pipeline.ProfileOptions(target=target, cwd=tmp_path, runs_root=tmp_path)
    candidates = ["anomaly-off", "dataloader-workers", "cpu-threads", "larger-batch"]
    chosen = pipeline.in_process_candidates(candidates, options, diagnosis)  # type: ignore[arg-type]
    # DataLoader workers switch between two iterators in one process; a batch size does not.
    assert chosen == ["anomaly-off", "dataloader-workers", "cpu-threads"]
    off = pipeline.ProfileOptions(target=target, cwd=tmp_path, runs_root=tmp_path, in_process=False)
    assert pipeline.in_process_candidates(candidates, off, diagnosis) == []  # type: ignore[arg-type]
    ranks = SimpleNamespace(record=SimpleNamespace(ranks_launched=2, ranks=()))
    assert pipeline.in_process_candidates(candidates, options, ranks) == []  # type: ignore[arg-type]
    command = pipeline.ProfileOptions(
        target=Target(kind="command", name="torchrun"), cwd=tmp_path, runs_root=tmp_path
    )
    assert pipeline.in_process_candidates(candidates, command, diagnosis) == []  # type: ignore[arg-type]


def test_a_fix_that_changes_the_arithmetic_gets_the_baselines_spread_first(
    tmp_path, monkeypatch
) -> None:
    runner, specs = make_runner(tmp_path, monkeypatch, {"cpu-threads": "faster: 1.5x"})
    runner.baseline_on_cuda = True
    runner.baseline_repeats = 1
    runner.session = runner.session.with_run("baseline", "baseline")
    runner.run_in_process(["cpu-threads"])
    # cpu-threads is judged at the "tf32" tolerance, widened by the baseline's own spread:
    # a second seeded baseline run comes before the fix's seeded run.
    assert [(s.label, s.run_dir.rsplit("runs/", 1)[1]) for s in specs[1:]] == [
        ("baseline", "baseline/repeat-2"),
        ("cpu-threads", "cpu-threads"),
    ]


def test_workers_that_crowd_the_scripts_threads_get_a_coupled_variant_of_their_own() -> None:
    from perfdoctor.optimize.sizing import WorkerSizing

    crowded = {"dataloader-workers": WorkerSizing(workers=2, reason="r", coupled_threads=1)}
    plan = pipeline.coupled_variant(crowded, ["dataloader-workers"])  # type: ignore[arg-type]
    assert plan is not None
    assert plan.label == "dataloader-workers+cpu-threads"
    assert plan.optimizations == ("dataloader-workers", "cpu-threads")
    roomy = {"dataloader-workers": WorkerSizing(workers=2, reason="r")}
    assert pipeline.coupled_variant(roomy, ["dataloader-workers"]) is None  # type: ignore[arg-type]
    assert pipeline.coupled_variant(crowded, ["cpu-threads"]) is None  # type: ignore[arg-type]


def test_on_a_cpu_the_seeded_baseline_is_not_repeated(tmp_path, monkeypatch) -> None:
    """A seeded CPU run repeats its losses bit for bit: a second one would measure a spread
    of 0 and change no tolerance, so only the fix's seeded run follows the A/B run."""
    runner, specs = make_runner(tmp_path, monkeypatch, {"cpu-threads": "faster: 1.5x"})
    runner.run_in_process(["cpu-threads"])
    assert [s.label for s in specs[1:]] == ["cpu-threads"]


def test_the_coupled_variant_is_an_arm_beside_the_workers_in_one_process(
    tmp_path, monkeypatch
) -> None:
    """The DataLoader workers are switched in one process (their twin loader), so their
    coupled variant (the workers with the threads the cores leave) is an arm of the same
    run: both appliers installed, compared with the baseline like the singles."""
    both = "dataloader-workers+cpu-threads"
    runner, specs = make_runner(tmp_path, monkeypatch, {both: "faster: 3x"})
    runner.run_in_process(["dataloader-workers"], coupled=("dataloader-workers", "cpu-threads"))
    ab = specs[0]
    assert [(a.label, a.optimizations) for a in ab.ab.arms] == [
        ("baseline", ()),
        ("dataloader-workers", ("dataloader-workers",)),
        (both, ("dataloader-workers", "cpu-threads")),
    ]
    assert [(c.label, c.reference, c.test) for c in ab.ab.comparisons] == [
        ("dataloader-workers", 0, 1),
        (both, 0, 2),
    ]
    assert set(ab.optimizations) == {"dataloader-workers", "cpu-threads"}
    plans = {v.label: v for v in runner.session.variants}
    assert plans[both].method == "in-process" and plans[both].ab_run == "ab"
    # Its seeded run applies both fixes for good.
    assert [(s.label, s.optimizations) for s in specs[1:]] == [
        (both, ("dataloader-workers", "cpu-threads"))
    ]


def test_in_one_process_the_coupled_variant_takes_the_place_of_the_workers_alone() -> None:
    """The README demo on 2 cores: workers beside the script's 2 threads outnumber the
    cores, so the coupled arm is measured instead of the contended workers alone (a third
    arm cost a third more per pair); the other singles stay."""
    from perfdoctor.optimize.sizing import WorkerSizing

    crowded = {"dataloader-workers": WorkerSizing(workers=2, reason="r", coupled_threads=1)}
    switched = ["anomaly-off", "dataloader-workers", "cpu-threads"]
    coupled = pipeline.coupled_variant(crowded, switched)  # type: ignore[arg-type]
    assert pipeline.in_process_singles(switched, coupled) == (["anomaly-off", "cpu-threads"], True)
    roomy = {"dataloader-workers": WorkerSizing(workers=2, reason="r")}
    none = pipeline.coupled_variant(roomy, switched)  # type: ignore[arg-type]
    assert pipeline.in_process_singles(switched, none) == (switched, False)
    # Measured by re-runs (fewer workers than the script's): not in one process at all.
    assert pipeline.in_process_singles(["anomaly-off"], coupled) == (["anomaly-off"], False)


def test_the_coupled_arm_carries_the_splits_prediction(tmp_path, monkeypatch) -> None:
    from perfdoctor.optimize.sizing import WorkerSizing

    runner, specs = make_runner(tmp_path, monkeypatch, {})
    runner.sizings = {
        "dataloader-workers": WorkerSizing(
            workers=2, reason="r", coupled_threads=1, predicted_speedup=1.75, predicted_from="x"
        )
    }
    runner.run_in_process([], coupled=("dataloader-workers", "cpu-threads"))
    assert [a.label for a in specs[0].ab.arms] == ["baseline", "dataloader-workers+cpu-threads"]
    (plan,) = runner.session.variants
    assert plan.predicted_speedup == 1.75 and plan.predicted_from == "x"
