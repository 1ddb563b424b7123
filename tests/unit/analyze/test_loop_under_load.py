"""Issue 32: the loop account under load, with compile named, with the user's functions
named, and the timed steps' extra time split by cause (analyze/loop_account.py)."""

from __future__ import annotations

import pytest

from perfdoctor.analyze.loop_account import account_steps, loop_summary, loop_warning
from perfdoctor.analyze.step_code import long_step_code
from perfdoctor.analyze.step_costs import timed_excess
from perfdoctor.model import StepRecord

# Measured (torch 2.13 CPU, 2 cores, load 11): a policy-gradient loop, a 200-step rollout
# in a pure-Python simulator with a no_grad forward each, then 10 updates. Quiet, an update
# is 0.88 ms and a rollout step 53 ms; here the intra-op threads stalled the updates to
# ~250 ms. Wall and stepping-thread CPU (ms) per step, steps 0-28 (5 warm-up, 20 timed).
_WALL = [1151, 250, 325, 260, 367, 292, 269, 290, 227, 296, 1293, 115, 153, 27, 2, 266, 2]
_WALL += [17, 74, 70, 1204, 241, 246, 283, 305, 252, 244, 270, 313]
_CPU = [245, 30, 40, 33, 45, 36, 33, 34, 27, 34, 271, 16, 22, 3, 2, 34, 2, 3, 11, 9, 267]
_CPU += [33, 35, 39, 43, 37, 36, 39, 42]
_NOGRAD = {0: 117.0, 10: 128.0, 20: 118.0}


def _phase(i: int) -> str:
    return "warmup" if i < 5 else "timed" if i < 25 else "profiled"


def _loaded_rollout() -> list[StepRecord]:
    return [
        StepRecord(
            index=i,
            phase=_phase(i),  # type: ignore[arg-type]
            wall_ms=float(w),
            cpu_ms=float(c),
            nograd_forward_ms=_NOGRAD.get(i),
        )
        for i, (w, c) in enumerate(zip(_WALL, _CPU, strict=True))
    ]


def test_rollouts_under_load_stay_loop_work() -> None:
    # Before: representative, no long steps (the stalled updates made the median 250 ms).
    account = account_steps(_loaded_rollout())
    assert account is not None
    assert [ls.index for ls in account.long_steps] == [0, 10, 20]
    assert account.period == 10
    assert account.load_stretch is not None and account.load_stretch >= 2.0
    assert not account.representative
    text = loop_warning(account)
    assert text is not None and "loaded" in text and "every 10 steps" in text


def test_the_same_rollouts_without_cpu_times_are_judged_by_wall_alone() -> None:
    # A record from before cpu_ms: no load correction, the old account.
    plain = [
        StepRecord(
            index=s.index, phase=s.phase, wall_ms=s.wall_ms, nograd_forward_ms=s.nograd_forward_ms
        )
        for s in _loaded_rollout()
    ]
    account = account_steps(plain)
    assert account is not None and account.load_stretch is None


def test_a_quiet_loop_is_not_called_loaded() -> None:
    steps = [
        StepRecord(index=i, phase=_phase(i), wall_ms=10.0 + (i % 3), cpu_ms=9.5 + (i % 3))  # type: ignore[arg-type]
        for i in range(29)
    ]
    account = account_steps(steps)
    assert account is not None and account.load_stretch is None and account.representative


def test_a_uniformly_stalled_loop_without_periodic_work_is_represented() -> None:
    # Every step stretched by the load, none longer than the others: nothing to flag.
    steps = [
        StepRecord(index=i, phase=_phase(i), wall_ms=250.0 + 7 * (i % 4), cpu_ms=33.0)  # type: ignore[arg-type]
        for i in range(29)
    ]
    account = account_steps(steps)
    assert account is not None and account.load_stretch is not None
    assert account.representative and not account.long_steps


def test_a_cold_compile_in_the_first_step_is_start_up_named_as_compile() -> None:
    # nanoGPT's shape: step 0 compiles for 9 s (compile.json), later steps are 120 ms.
    steps = [
        StepRecord(index=i, phase=_phase(i), wall_ms=9200.0 if i == 0 else 120.0)  # type: ignore[arg-type]
        for i in range(29)
    ]
    account = account_steps(steps, compile_ms={0: 9000.0})
    assert account is not None and account.representative and not account.long_steps
    assert account.first_step_startup_ms == pytest.approx(9080.0)
    assert account.startup_costs_ms.get("compile_ms") == pytest.approx(9000.0)
    assert loop_summary(account)["startup_costs_ms"]["compile_ms"] == pytest.approx(9000.0)


def test_a_compile_inside_the_timed_steps_leads_their_extra_time() -> None:
    # timm --torchcompile's shape: one timed step compiles the eval graph (9.5 s), and the
    # DataLoader waits 8 ms a step.
    steps = [
        StepRecord(
            index=i,
            phase=_phase(i),  # type: ignore[arg-type]
            wall_ms=9600.0 if i == 12 else 100.0 + (i % 2) * 4,
            data_wait_ms=8.0 + (i % 2) * 3,
        )
        for i in range(29)
    ]
    excess = timed_excess(steps, {12: 9400.0})
    assert excess is not None and excess.longest_index == 12
    lead = excess.lead_named()
    assert lead is not None and lead[0] == "compile_ms" and lead[1] > 0.9
    assert excess.share("data_wait_ms") < 0.01


def test_extra_data_waits_are_the_data_share_of_the_extra_time() -> None:
    steps = [
        StepRecord(
            index=i,
            phase=_phase(i),  # type: ignore[arg-type]
            wall_ms=150.0 if i % 5 == 0 else 50.0,
            data_wait_ms=105.0 if i % 5 == 0 else 5.0,
        )
        for i in range(29)
    ]
    excess = timed_excess(steps)
    assert excess is not None
    assert excess.share("data_wait_ms") == pytest.approx(1.0)
    assert excess.lead_named() is None


def test_the_long_steps_code_names_the_simulator() -> None:
    # step_stacks rows: [step, file, function, first line, line, samples, CPU ms]
    rows = [
        [10, "rollout.py", "simulate", 14, 20, 30, 300.0],
        [10, "rollout.py", "simulate", 14, 18, 2, 20.0],
        [10, "rollout.py", "rollout", 26, 31, 12, 120.0],
        [3, "rollout.py", "<module>", 1, 46, 50, 500.0],  # a short step: not counted
        [20, "rollout.py", "simulate", 14, 20, 28, 280.0],
        [20, "rollout.py", "rollout", 26, 32, 2, 20.0],
    ]
    found = long_step_code(rows, [10, 20])
    assert [c.function for c in found] == ["simulate", "rollout"]
    assert found[0].share == pytest.approx(600.0 / 740.0)
    assert found[0].describe() == "simulate() at rollout.py:18-20 (81% of the sampled CPU time)"
    assert long_step_code(rows[:1][:0], [10]) == ()
    assert long_step_code([[10, "a.py", "f", 1, 2, 3, 30.0]], [10]) == ()  # too few samples
