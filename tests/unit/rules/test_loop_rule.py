"""loop-work-outside-steps (rules/loop.py) over fact sets."""

from __future__ import annotations

from perfdoctor.rules import ALL_RULES, evaluate
from perfdoctor.rules.loop import LOOP_WORK

from .factsets import make_facts

RULE = next(r for r in ALL_RULES if r.id == LOOP_WORK)


def ids(**overrides: object) -> list[str]:
    return [f.rule_id for f in evaluate(make_facts(**overrides)).findings]  # type: ignore[arg-type]


def test_rollouts_holding_most_of_the_loop_are_a_finding() -> None:
    facts = make_facts(
        loop_long_step_frac=0.67,
        loop_timed_step_frac=0.29,
        loop_long_steps=2,
        loop_period_steps=16,
        loop_long_step_cost="nograd_forward",
    )
    finding = RULE.check(facts, RULE.thresholds)
    assert finding is not None and finding.severity == "warning"
    assert finding.title.startswith("Long steps every 16 steps hold 67% of the loop: mostly")
    assert finding.title.endswith("no_grad forwards of the model in train mode")
    assert "more environments per vectorised step" in finding.explanation
    assert finding.explanation.startswith("One step in every 16 takes 3x")
    assert finding.evidence[0].threshold == 0.2
    assert LOOP_WORK in ids(loop_long_step_frac=0.67, loop_long_step_cost="eval_forward")


def test_a_small_share_or_no_account_is_no_finding() -> None:
    assert LOOP_WORK not in ids(loop_long_step_frac=0.1)
    skipped = {s.rule_id for s in evaluate(make_facts(loop_long_step_frac=None)).skipped}
    assert LOOP_WORK in skipped


def test_only_a_heavy_first_step_is_an_info_that_says_so() -> None:
    facts = make_facts(loop_long_step_frac=0.48, loop_long_step_recurs=False, loop_long_steps=1)
    finding = RULE.check(facts, RULE.thresholds)
    assert finding is not None and finding.severity == "info"
    assert "one-off start-up cost" in finding.explanation
    assert finding.explanation.startswith("One step takes 3x")
