"""pipeline.py's in-process chain: which arms a continuation run carries."""

from __future__ import annotations

from perfdoctor.model import ABDesign, Arm, Comparison
from perfdoctor.pipeline import _open_design


def test_a_continuation_carries_only_the_open_comparisons_and_their_arms() -> None:
    design = ABDesign(
        arms=(Arm("baseline"), Arm("a", ("a",)), Arm("b", ("b",)), Arm("c", ("c",))),
        comparisons=(Comparison("a", 0, 1), Comparison("b", 0, 2), Comparison("c", 0, 3)),
    )
    arms, comparisons = _open_design(design, ["c"])
    assert [a.label for a in arms] == ["baseline", "c"]
    assert comparisons == (Comparison("c", 0, 1),)
    # A peel comparison's reference is not the baseline: both its arms go along.
    stack = ABDesign(
        arms=(Arm("baseline"), Arm("stacked", ("a", "b")), Arm("stacked-without-a", ("b",))),
        comparisons=(Comparison("stacked", 0, 1), Comparison("a-in-stack", 2, 1)),
    )
    arms, comparisons = _open_design(stack, ["a-in-stack"])
    assert [a.label for a in arms] == ["stacked", "stacked-without-a"]
    assert comparisons == (Comparison("a-in-stack", 1, 0),)


def test_no_process_is_started_for_less_than_a_round_of_budget() -> None:
    from perfdoctor.pipeline import continuation_refusal

    common = {"processes": 4, "budget_s": 60.0, "elapsed_s": 90.0, "wall_budget_s": 180.0}
    # 55 s measured over 3 rounds (18.3 s a round): one more would end at 73 s, within
    # 1.25x the budget (the demo with one busy core decided on that pair) ...
    assert continuation_refusal(spent_s=55.0, rounds_done=3, **common) is None
    # ... 59 s over 2 rounds (29.5 s a round) would end at 88.5 s: past it.
    why = continuation_refusal(spent_s=59.0, rounds_done=2, **common)
    assert why is not None and "one more round (29.5s) would overrun it by more than 25%" in why
    assert continuation_refusal(spent_s=40.0, rounds_done=8, **common) is None
    assert (
        continuation_refusal(spent_s=61.0, rounds_done=12, **common) == "the 60s measurement budget"
    )
    late = {**common, "elapsed_s": 200.0}
    assert (
        continuation_refusal(spent_s=10.0, rounds_done=2, **late) == "the 180s budget of the chain"
    )
