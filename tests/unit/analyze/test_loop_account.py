"""The loop account (analyze/loop_account.py) over hand-made steps."""

from __future__ import annotations

from typing import Any

import pytest

from perfdoctor.analyze.loop_account import account_steps, loop_summary, loop_warning
from perfdoctor.model import StepRecord
from perfdoctor.run_schema import ProgressRow

WARMUP, TIMED = 5, 10


def steps(
    walls: dict[int, float], n: int = 30, base: float = 10.0, **extra: Any
) -> list[StepRecord]:
    """n steps of `base` ms; `walls` overrides some; `extra[i]` = fields of step i."""
    out = []
    for i in range(n):
        phase = "warmup" if i < WARMUP else "timed" if i < WARMUP + TIMED else "profiled"
        fields = extra.get(f"s{i}", {})
        out.append(StepRecord(index=i, phase=phase, wall_ms=walls.get(i, base), **fields))
    return out


def test_a_loop_that_only_trains_is_represented_and_names_no_cost() -> None:
    account = account_steps(steps({}))
    assert account is not None
    assert account.representative and not account.long_steps and account.costs_ms == {}
    assert account.timed_share == pytest.approx(1.0)
    assert loop_warning(account) is None


def test_a_rollout_every_16_steps_outside_the_window_is_flagged_with_its_costs() -> None:
    # PPO's shape: the rollout lands in the step of the first minibatch of each update.
    rollout = {"nograd_forward_ms": 600.0}
    account = account_steps(
        steps({0: 1810.0, 16: 1810.0}, n=30, base=57.0, s0=rollout, s16=rollout)
    )
    assert account is not None and not account.representative
    assert [ls.index for ls in account.long_steps] == [0, 16]
    assert account.period == 16
    assert account.long_steps[1].costs_ms == pytest.approx(
        {"nograd_forward_ms": 600.0, "other_ms": 1810.0 - 57.0 - 600.0}
    )
    assert account.long_share == pytest.approx(2 * (1810 - 57) / (28 * 57 + 2 * 1810))
    assert account.timed_share is not None and account.timed_share < 0.5
    text = loop_warning(account)
    assert text is not None
    assert "steps 5-14" in text and "0, 16" in text and "every 16 steps" in text
    assert "--steps 16" in text
    summary = loop_summary(account)
    assert summary["representative"] is False and summary["period"] == 16


def test_a_small_share_of_long_steps_is_represented() -> None:
    evals = {"eval_forward_ms": 20.0}
    account = account_steps(steps({8: 40.0, 24: 40.0}, s8=evals, s24=evals))
    assert account is not None and account.representative
    assert [ls.index for ls in account.long_steps] == [8, 24]
    assert account.costs_ms["eval_forward_ms"] == pytest.approx(40.0)


def test_a_timed_long_step_is_still_left_out_by_the_medians() -> None:
    evals = {"eval_forward_ms": 200.0}
    account = account_steps(steps({8: 300.0, 24: 300.0}, s8=evals, s24=evals))
    assert account is not None and not account.representative
    assert account.untimed_long_ms == pytest.approx(290.0)  # step 24; step 8 was timed
    text = loop_warning(account)
    assert text is not None and "step 8 was timed" in text


def test_a_slow_first_step_alone_is_start_up_not_loop_work() -> None:
    account = account_steps(steps({0: 900.0}))
    assert account is not None and account.representative and not account.long_steps
    assert account.first_step_startup_ms == pytest.approx(890.0)


def test_a_first_step_that_is_a_rollout_is_loop_work_of_unknown_recurrence() -> None:
    # CleanRL's ppo_continuous_action.py in a 25-step run: one rollout at step 0, 60 ms of
    # its 297 ms excess in no_grad policy forwards, the rest the environment.
    account = account_steps(steps({0: 297.0}, s0={"nograd_forward_ms": 60.0}))
    assert account is not None
    assert [ls.index for ls in account.long_steps] == [0]
    assert account.first_step_startup_ms == 0 and not account.representative
    # A start-up step whose named part is small stays start-up.
    account = account_steps(steps({0: 297.0}, s0={"nograd_forward_ms": 10.0}))
    assert account is not None and account.representative and not account.long_steps


def test_a_first_step_that_recurs_later_is_loop_work() -> None:
    # An environment-heavy rollout: little named time, but the same kind recurs at step 20.
    rollout = {"nograd_forward_ms": 30.0}
    account = account_steps(steps({0: 400.0, 20: 400.0}, s0=rollout, s20=rollout))
    assert account is not None
    assert [ls.index for ls in account.long_steps] == [0, 20]
    assert account.first_step_startup_ms == 0 and not account.representative


def test_checkpoint_time_is_named_and_jitter_is_not_a_long_step() -> None:
    account = account_steps(
        steps({3: 25.0, 17: 15.0, 18: 60.0, 22: 80.0}, s18={"save_ms": 45.0}),
    )
    assert account is not None
    assert [ls.index for ls in account.long_steps] == [18]
    assert account.unexplained_long_steps == 1  # step 22: long, with nothing named in it
    assert account.long_steps[0].costs_ms == pytest.approx({"save_ms": 45.0, "other_ms": 5.0})


def test_setup_time_is_read_from_the_first_steps_progress_row() -> None:
    rows = [ProgressRow(step=0, phase="warmup", t=2.5, wall_ms=10.0)]
    account = account_steps(steps({}), rows)
    assert account is not None and account.setup_ms == pytest.approx(2490.0)


def test_no_timed_step_no_account() -> None:
    assert account_steps([StepRecord(index=0, phase="warmup", wall_ms=1.0)]) is None


def test_a_heavy_first_step_that_did_not_come_back_is_said_to_be_unknown() -> None:
    # PPO with 40 minibatch steps per update, 19 steps run: only the first rollout is seen.
    account = account_steps(steps({0: 1810.0}, n=19, base=57.0, s0={"nograd_forward_ms": 900.0}))
    assert account is not None and not account.representative and not account.recurs
    text = loop_warning(account)
    assert text is not None and "did not come back within the 19 steps run" in text
    assert loop_summary(account)["recurs"] is False
