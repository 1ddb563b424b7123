"""The compile rules (rules/compile_cost.py) over the compile facts."""

from __future__ import annotations

import pytest

from perfdoctor.optimize.recommend import recommend
from perfdoctor.render.summary import gain_text
from perfdoctor.rules import compile_cost
from perfdoctor.rules.engine import evaluate_rules

from .factsets import make_facts


def _run(**facts):
    results = evaluate_rules(make_facts(**facts), compile_cost.RULES)
    return {f.rule_id: f for f in results.findings}, {s.rule_id for s in results.skipped}


@pytest.mark.parametrize(
    ("frac", "severity"), [(0.04, None), (0.05, "warning"), (0.19, "warning"), (0.2, "critical")]
)
def test_graph_breaks_fire_from_five_percent_of_the_step(frac: float, severity: str | None) -> None:
    found, _ = _run(
        compile_graph_break_sites=2,
        compile_break_step_frac=frac,
        compile_break_eager_ms_per_step=frac * 100,
        compile_top_break="train.py:53 (a torch.compiler.disable'd function)",
    )
    finding = found.get(compile_cost.GRAPH_BREAKS)
    assert (finding.severity if finding else None) == severity
    if finding:
        assert "train.py:53" in finding.explanation
        assert finding.gain.step_time_frac == pytest.approx(frac)
        # The eager time between graphs is a ceiling: the moved code still runs, compiled.
        assert finding.gain.upper_bound
        assert gain_text(finding.gain, with_method=False).startswith("saves up to ~")


def test_recompile_cost_names_the_costliest_recompile() -> None:
    found, _ = _run(
        compile_recompile_step_frac=0.3,
        compile_recompile_ms_per_step=120.0,
        compile_top_recompile="train.py:57 (a Python number that changes between calls)",
    )
    finding = found[compile_cost.RECOMPILE_COST]
    assert finding.severity == "critical"
    assert "train.py:57" in finding.explanation


def test_cudagraph_skips_fire_on_any_skip() -> None:
    found, _ = _run(cudagraph_skip_count=1)
    assert compile_cost.CUDAGRAPH_SKIPS in found
    found, _ = _run(cudagraph_skip_count=0)
    assert compile_cost.CUDAGRAPH_SKIPS not in found


def test_without_compile_facts_the_rules_are_skipped_saying_why() -> None:
    facts = make_facts(
        compile_graph_break_sites=None,
        compile_break_step_frac=None,
        compile_recompile_step_frac=None,
        cudagraph_skip_count=None,
    )
    results = evaluate_rules(facts, compile_cost.RULES)
    assert not results.findings
    reasons = {s.rule_id: s.reason for s in results.skipped}
    assert set(reasons) == {r.id for r in compile_cost.RULES}
    assert all("did not run torch.compile" in r for r in reasons.values())


@pytest.mark.parametrize(("in_steps", "blamed"), [(0.0, False), (None, True), (40.0, True)])
def test_jitter_names_recompiles_only_when_they_ran_in_the_measured_steps(
    in_steps: float | None, blamed: bool
) -> None:
    from perfdoctor.rules import jitter

    facts = make_facts(
        step_jitter_ratio=2.5, recompile_count=1, compile_recompile_ms_per_step=in_steps
    )
    found = {f.rule_id: f for f in evaluate_rules(facts, jitter.RULES).findings}
    assert ("recompiled" in found[jitter.STEP_JITTER].explanation) is blamed
    recompiles = jitter.check_recompilations(
        make_facts("gpu", recompile_count=3, compile_recompile_ms_per_step=in_steps),
        {"min_recompiles": 2.0, "recompile_limit": 8.0, "min_distinct_shapes": 3.0},
    )
    assert recompiles is not None
    assert ("inside training." in recompiles.explanation) is blamed


@pytest.mark.parametrize(("disable_sites", "lift"), [(1, ("compile-lift-disable",)), (0, ())])
def test_a_disabled_helper_is_measured_by_lifting_it(disable_sites: int, lift: tuple) -> None:
    found, _ = _run(
        compile_graph_break_sites=2,
        compile_break_step_frac=0.3,
        compile_break_eager_ms_per_step=3.0,
        compile_disable_break_sites=disable_sites,
    )
    assert found[compile_cost.GRAPH_BREAKS].optimizations == lift


_T = {"min_recompiles": 2.0, "recompile_limit": 8.0, "min_distinct_shapes": 3.0}


@pytest.mark.parametrize(
    ("configured", "hit", "reached"),
    [
        (None, None, True),  # no compile.json: 40 recompiles against the default 8
        (64.0, None, False),  # the script raised the limit: 40 of 64 is not reached
        (64.0, False, False),
        (64.0, True, True),  # dynamo said a frame reached it
        (8.0, False, False),  # 40 recompiles over many frames, none reached 8
    ],
)
def test_the_recompile_limit_is_the_one_the_script_set(
    configured: float | None, hit: bool | None, reached: bool
) -> None:
    from perfdoctor.rules import jitter

    finding = jitter.check_recompilations(
        make_facts(
            "gpu",
            recompile_count=40,
            compile_recompile_limit=configured,
            compile_recompile_limit_hit=hit,
        ),
        _T,
    )
    assert finding is not None
    assert ("reached dynamo's recompile limit" in finding.explanation) is reached
    assert finding.severity == ("critical" if reached else "warning")
    if reached:
        assert f"({configured or 8:g} per frame)" in finding.explanation
    elif configured == 64.0:
        assert "recompile limit was raised to 64" in finding.explanation


def test_the_lift_recommendation_carries_the_ceiling_and_says_up_to() -> None:
    facts = {
        "compile_graph_break_sites": 1,
        "compile_disable_break_sites": 1,
        "compile_break_step_frac": 0.49,
        "compile_break_eager_ms_per_step": 2.0,
    }
    found, _ = _run(**facts)
    finding = found[compile_cost.GRAPH_BREAKS]
    (rec,) = recommend([finding], make_facts(**facts))
    assert rec.optimization_id == "compile-lift-disable"
    assert rec.expected_gain.upper_bound
    assert gain_text(rec.expected_gain, with_method=False) == "saves up to ~49% of step time"
