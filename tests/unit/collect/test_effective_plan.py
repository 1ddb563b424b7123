"""The child's step plan: warm-up, timed, one untimed step where the profiler starts, profiled."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor.collect.probes import EffectivePlan
from perfdoctor.collect.profiler_window import ProfilerWindow
from perfdoctor.model import StepPlan


def child_plan(warmup: int, timed: int, profiled: int, *, profile: bool = True) -> EffectivePlan:
    spec = SimpleNamespace(plan=StepPlan(warmup, timed, profiled), profile=profile)
    return EffectivePlan.from_spec(spec)


def test_the_profiler_starts_in_an_untimed_step_of_its_own() -> None:
    plan = child_plan(2, 3, 2)
    phases = [plan.phase(i) for i in range(plan.total)]
    assert phases == ["warmup"] * 2 + ["timed"] * 3 + ["profiler_warmup"] + ["profiled"] * 2
    window = ProfilerWindow(Path("unused"), first_step=plan.profiled_start, steps=plan.profiled)
    assert plan.phase(window.open_at) == "profiler_warmup"  # kineto's WARMUP is in no timed step
    assert [i for i in range(plan.total) if plan.is_phase_end(i)] == [1, 4, 5, 7]
    assert plan.to_json() == {
        "warmup_steps": 2,
        "timed_steps": 3,
        "profiler_warmup_steps": 1,
        "profiled_steps": 2,
        "total_steps": 8,
    }


def test_without_a_profiler_every_step_after_warmup_is_timed() -> None:
    plan = child_plan(2, 3, 2, profile=False)
    assert [plan.phase(i) for i in range(plan.total)] == ["warmup"] * 2 + ["timed"] * 3
    assert plan.to_json()["profiler_warmup_steps"] == 0
    assert plan.total == 5


@pytest.mark.parametrize("steps", [(5, 20, 3), (2, 5, 2), (1, 3, 0), (0, 0, 2), (3, 0, 1)])
def test_the_child_runs_as_many_steps_as_the_parent_expects(steps: tuple[int, int, int]) -> None:
    assert child_plan(*steps).total == StepPlan(*steps).total_steps
