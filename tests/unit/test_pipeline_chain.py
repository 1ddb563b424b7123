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
