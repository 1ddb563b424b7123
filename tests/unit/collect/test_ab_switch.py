"""collect/ab_switch.py: the controller switches fake appliers in blocks and stops on time."""

from __future__ import annotations

import json
from pathlib import Path

from perfdoctor.collect.ab_switch import ABController
from perfdoctor.model import ABDesign, Arm, Comparison
from perfdoctor.optimize.inprocess import load_ab_log


class FakeApplier:
    def __init__(self, opt_id: str, switchable: bool = True) -> None:
        self.id = opt_id
        self.switchable = switchable
        self.applied: bool | None = True
        self.detail = ""
        self.on = True
        self.history: list[bool] = []
        self.verified_on: list[bool] = []

    def switch(self, on: bool) -> None:
        self.on = on
        self.history.append(on)

    def run_verify(self, final: bool) -> None:
        self.verified_on.append(self.on)

    def refuse(self, reason: str) -> None:
        self.applied = False
        self.detail = reason


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(controller: ABController, clock: Clock, ms_for, max_steps: int = 5000) -> int:
    """Run steps like the tracker does until the controller ends the plan."""
    ended: list[int] = []
    controller._end_plan_after = ended.append  # type: ignore[method-assign]
    index = 0
    while not ended and index < max_steps:
        controller.step_started(index)
        arm = controller.active_label()
        ms = ms_for(arm, index)
        clock.now += ms / 1000.0
        controller.step_closed(index, ms / 1000.0)
        index += 1
    return ended[0] if ended else -1


def design(*fixes: str, budget_s: float = 60.0) -> ABDesign:
    arms = (Arm("baseline"), *(Arm(f, (f,)) for f in fixes))
    return ABDesign(
        arms=arms,
        comparisons=tuple(Comparison(f, 0, k + 1) for k, f in enumerate(fixes)),
        budget_s=budget_s,
        block_steps=4,
    )


def test_a_clear_gain_is_decided_and_the_fix_is_switched_per_block(tmp_path: Path) -> None:
    fix = FakeApplier("fix")
    clock = Clock()
    controller = ABController(
        design("fix"), [fix], lambda n: None, tmp_path, warmup_steps=3, clock=clock
    )
    assert fix.on is False  # the warm-up runs the script as it is
    end = drive(controller, clock, lambda arm, i: 10.0 if arm == "fix" else 20.0 + (i % 3))
    assert end > 0
    log = load_ab_log(tmp_path)
    assert log is not None
    assert log.comparisons[0].ended == "faster"
    assert log.stop_reason == "every comparison decided"
    assert fix.on is False  # back to the script as it is after the plan
    assert fix.verified_on and all(fix.verified_on)  # verified only while on
    assert True in fix.history and False in fix.history
    rows = json.loads((tmp_path / "ab.json").read_text())["blocks"]
    assert all(len(b["step_ms"]) == 1 + 4 for b in rows)


def test_an_a_a_comparison_ends_as_no_gain(tmp_path: Path) -> None:
    clock = Clock()
    controller = ABController(
        design("same"), [FakeApplier("same")], lambda n: None, tmp_path, 2, clock=clock
    )
    drive(controller, clock, lambda arm, i: 10.0 + 0.01 * (i % 5))
    log = load_ab_log(tmp_path)
    assert log is not None and log.comparisons[0].ended == "no-gain"


def test_the_budget_ends_an_undecided_comparison(tmp_path: Path) -> None:
    clock = Clock()
    controller = ABController(
        design("noisy", budget_s=2.0),
        [FakeApplier("noisy")],
        lambda n: None,
        tmp_path,
        2,
        clock=clock,
    )
    import random

    rng = random.Random(1)
    drive(controller, clock, lambda arm, i: 10.0 * rng.choice((0.3, 1.0, 3.0)))
    log = load_ab_log(tmp_path)
    assert log is not None
    assert log.stop_reason is not None and "budget" in log.stop_reason
    assert log.measure_s >= 2.0


def test_a_refused_or_unswitchable_fix_ends_its_comparison_only(tmp_path: Path) -> None:
    refused, fixed, stiff = (
        FakeApplier("refused"),
        FakeApplier("fixed"),
        FakeApplier("stiff", False),
    )
    refused.applied = False
    refused.detail = "nothing to change"
    clock = Clock()
    controller = ABController(
        design("refused", "fixed", "stiff"),
        [refused, fixed, stiff],
        lambda n: None,
        tmp_path,
        2,
        clock=clock,
    )
    drive(controller, clock, lambda arm, i: 5.0 if arm == "fixed" else 10.0)
    log = load_ab_log(tmp_path)
    assert log is not None
    ends = {c.label: c.ended for c in log.comparisons}
    assert ends["refused"] == "not applied: refused: nothing to change"
    assert ends["stiff"] == "cannot switch: stiff"
    assert ends["fixed"] == "faster"
    assert not stiff.history  # never switched


def test_the_script_ending_first_keeps_the_rounds_done(tmp_path: Path) -> None:
    clock = Clock()
    controller = ABController(
        design("fix"), [FakeApplier("fix")], lambda n: None, tmp_path, 2, clock=clock
    )
    for index in range(25):  # the script's loop ends after 25 steps
        controller.step_started(index)
        clock.now += 0.01
        controller.step_closed(index, 0.01 if controller.active_label() == "fix" else 0.02)
    controller.finish()
    log = load_ab_log(tmp_path)
    assert log is not None and log.blocks
    assert log.stop_reason == "the script ended first"


def test_every_fix_refused_before_the_first_block_ends_the_plan_cleanly(tmp_path: Path) -> None:
    # cpu-threads refuses at the script's first step ("nothing to change"): the first block
    # then has no arm left to run; this used to raise IndexError in the step hook.
    refused, stiff = FakeApplier("refused"), FakeApplier("stiff", False)
    clock = Clock()
    controller = ABController(
        design("refused", "stiff"), [refused, stiff], lambda n: None, tmp_path, 3, clock=clock
    )
    refused.refuse("nothing to change")
    end = drive(controller, clock, lambda arm, i: 10.0)
    assert end == 4  # the plan ends after the step that would have opened the first block
    log = load_ab_log(tmp_path)
    assert log is not None
    assert log.stop_reason == "no comparison left to measure"
    assert log.rounds == 0 and not log.blocks
    ends = {c.label: c.ended for c in log.comparisons}
    assert ends == {
        "refused": "not applied: refused: nothing to change",
        "stiff": "cannot switch: stiff",
    }
    assert controller.active_label() is None
    assert not stiff.history and refused.history == [False]  # off, as the script is


def test_only_a_fix_with_a_costly_first_use_spends_a_first_block_uncounted(
    tmp_path: Path,
) -> None:
    # "compile" pays its compile in its first block; "cheap" (a thread count, anomaly mode)
    # and the script as it is (warm from the plan's warm-up) count from their first block.
    clock = Clock()
    controller = ABController(
        design("compile", "cheap"),
        [FakeApplier("compile"), FakeApplier("cheap")],
        lambda n: None,
        tmp_path,
        2,
        clock=clock,
    )
    drive(controller, clock, lambda arm, i: 10.0 + (i % 3))
    log = load_ab_log(tmp_path)
    assert log is not None
    warm = {b.arm for b in log.blocks if b.arm_warmup}
    assert warm == {1}
    assert all(not b.arm_warmup for b in log.blocks if b.round == 1 and b.arm != 1)


def test_a_round_that_runs_far_past_the_budget_ends_within_it(tmp_path: Path) -> None:
    """Three arms and a 1 s budget: the first round is quick (0.15 s), then the machine
    slows the steps 40x and the second round's blocks take 2 s each. That round would end
    at 6.15 s of measurement; it ends after its first block instead, past
    ROUND_OVERRUN_FACTOR x the budget, and the first round's pairs count."""
    from perfdoctor.optimize.inprocess import ROUND_OVERRUN_FACTOR, block_pairs

    clock = Clock()
    controller = ABController(
        design("a", "b", budget_s=1.0), [FakeApplier("a"), FakeApplier("b")],
        lambda n: None, tmp_path, 2, clock=clock,
    )  # fmt: skip
    drive(controller, clock, lambda arm, i: 10.0 + 0.5 * (i % 3) if i < 17 else 400.0)
    log = load_ab_log(tmp_path)
    assert log is not None and log.stop_reason is not None
    assert "within a round" in log.stop_reason
    assert ROUND_OVERRUN_FACTOR * 1.0 <= log.measure_s < 3.0
    assert log.rounds == 2 and len(log.blocks) == 4
    for comparison in controller.design.comparisons:
        assert len(block_pairs(log.blocks, comparison)) >= 1


def test_the_first_round_ends_even_past_the_budget(tmp_path: Path) -> None:
    clock = Clock()
    controller = ABController(
        design("a", "b", budget_s=1.0), [FakeApplier("a"), FakeApplier("b")],
        lambda n: None, tmp_path, 2, clock=clock,
    )  # fmt: skip
    drive(controller, clock, lambda arm, i: 400.0)  # 2 s a block from the start
    log = load_ab_log(tmp_path)
    assert log is not None and log.rounds == 1 and len(log.blocks) == 3
    assert log.stop_reason is not None and "within a round" not in log.stop_reason
