"""FlopCounterMode in the child: one warm-up step's FLOPs, counted without touching the
script's numerics, and what the run's facts make of them on a CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_child_launch import ChildRun, run_child

from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.model import StepPlan

pytestmark = pytest.mark.integration

# train_loop.py: Linear(8, 16) -> ReLU -> Linear(16, 1), batch 4. Forward: 2*4*8*16 + 2*4*16*1;
# backward: both weight gradients (2*16*4*8, 2*1*4*16) and the second layer's input
# gradient (2*4*1*16); the first layer's input needs no gradient.
TRAIN_LOOP_FLOPS = 1024 + 128 + 1024 + 128 + 128
PLAN = StepPlan(warmup_steps=2, timed_steps=3, profiled_steps=0)


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """One child with the FLOPs counted (the default): the counting test and the facts test
    read the same run."""
    return run_child(tmp_path_factory.mktemp("on"), "train_loop.py", "--epochs", "2", plan=PLAN)


def test_the_last_warm_up_step_is_counted_and_the_losses_do_not_change(
    tmp_path: Path, counted: ChildRun
) -> None:
    assert counted.returncode == 0, counted.output
    info = counted.observations["flop_count"]
    assert info["flops_per_step"] == TRAIN_LOOP_FLOPS, info
    assert info["step"] == PLAN.warmup_steps - 1  # a warm-up step, never a timed one
    assert info["counted_step_ms"] > 0 and info["previous_step_ms"] > 0
    assert set(info["by_op"]) <= {"aten.addmm", "aten.mm"}

    os.environ["PERFDOCTOR_FLOP_COUNT"] = "0"
    try:
        plain = run_child(tmp_path / "off", "train_loop.py", "--epochs", "2", plan=PLAN)
    finally:
        del os.environ["PERFDOCTOR_FLOP_COUNT"]
    assert plain.returncode == 0, plain.output
    assert "flops_per_step" not in plain.observations["flop_count"]
    # Same seed, same losses to the bit: counting ran no extra forward/backward and left
    # the gradients and the optimizer alone.
    assert [s["loss"] for s in counted.steps] == [s["loss"] for s in plain.steps]
    assert len(counted.steps) == len(plain.steps) == PLAN.total_steps


def test_cpu_facts_give_mfu_against_an_estimated_peak(counted: ChildRun) -> None:
    run = counted
    assert run.returncode == 0, run.output
    facts = derive_facts(load_run(run.run_dir))
    assert facts.get("flops_per_step") == TRAIN_LOOP_FLOPS
    achieved = facts.get("achieved_tflops")
    assert isinstance(achieved, float) and achieved > 0
    mfu = facts.get("mfu_frac")
    peak = facts.get("mfu_peak")
    if facts.get("mfu_missing") is None:
        assert isinstance(mfu, float) and 0 < mfu < 1
        assert isinstance(peak, str) and "estimated" in peak and "CPU" in peak, peak
    else:  # a machine whose /proc/cpuinfo gives no clock: the reason is said instead
        assert mfu is None and "CPU" in str(facts.get("mfu_missing"))


def test_one_warm_up_step_is_not_enough_and_says_why(tmp_path: Path) -> None:
    """The first step (lazy init, torch.compile's first compilation) is never counted."""
    plan = StepPlan(warmup_steps=1, timed_steps=3, profiled_steps=0)
    run = run_child(tmp_path, "train_loop.py", plan=plan)
    assert run.returncode == 0, run.output
    info = run.observations["flop_count"]
    assert "flops_per_step" not in info and "warm-up" in info["skipped"]
