"""The profiler window's budget (collect/profiler_window.py): a window whose steps take far
longer under the profiler than the timed steps did is cut short and says what it dropped.
A real torch.profiler in-process, driven the way the probes drive it."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
import torch

from perfdoctor import rundir
from perfdoctor.collect import profiler_window
from perfdoctor.collect.profiler_window import ProfilerWindow

FIRST, STEPS = 3, 3


def run_window(tmp_path: Path, step_s: float, timed_s: float = 0.001) -> ProfilerWindow:
    """Timed steps of `timed_s`, then the profiler warm-up step and three profiled steps of
    `step_s` each, then the step after the window."""
    window = ProfilerWindow(tmp_path, first_step=FIRST, steps=STEPS)
    for _ in range(5):
        window.timed_step(timed_s)
    x = torch.randn(64, 64)
    for index in range(FIRST - 1, FIRST + STEPS):
        window.on_step_start(index)
        x = torch.tanh(x @ x)
        time.sleep(step_s)
    window.finish()
    return window


def profiler_steps(tmp_path: Path) -> list[str]:
    (trace,) = rundir.find_traces(tmp_path)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))


@pytest.mark.parametrize(
    ("slow_factor", "min_budget", "why"),
    [
        (2.5, 60.0, "a timed step (> 2.5x: Python-heavy"),  # the slow-step rule alone
        (1e9, 0.0, "past its budget of 0.0 s"),  # the time budget alone (3 x 3 x 1 ms)
    ],
)
def test_a_window_past_its_bound_keeps_its_first_step_and_says_what_it_dropped(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    slow_factor: float,
    min_budget: float,
    why: str,
) -> None:
    monkeypatch.setattr(profiler_window, "SLOW_STEP_FACTOR", slow_factor)
    monkeypatch.setattr(profiler_window, "MIN_WINDOW_BUDGET_S", min_budget)
    if min_budget == 0.0:
        monkeypatch.setattr(profiler_window, "WINDOW_BUDGET_FACTOR", 0.0)
    window = run_window(tmp_path, step_s=0.05)  # 1 ms timed steps, 50 ms profiled ones
    info = window.info
    assert info["dropped_steps"] == STEPS - 1
    assert "recorded 1 of 3 steps" in info["dropped_why"]
    assert why in info["dropped_why"]
    assert "the other 2 ran without it" in info["dropped_why"]
    assert info["record_s"] >= 0.05 and info["export_s"] >= 0.0
    assert info["trace_files"] and profiler_steps(tmp_path) == [f"ProfilerStep#{FIRST}"]
    assert not window.is_open
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no leftovers


def test_a_window_within_its_budget_records_every_planned_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Profiled steps as long as the timed ones (the sleep dominates the profiler's cost). The
    # limits are raised so that a loaded machine, which slows the profiled steps more than the
    # timed ones, cannot turn this into a test of timing: within the budget, nothing is cut.
    monkeypatch.setattr(profiler_window, "WINDOW_BUDGET_FACTOR", 1000.0)
    monkeypatch.setattr(profiler_window, "SLOW_STEP_MIN_EXTRA_S", 10.0)
    window = run_window(tmp_path, step_s=0.05, timed_s=0.05)
    assert "dropped_steps" not in window.info
    assert window.info["record_s"] > 0 and "export_s" in window.info
    assert profiler_steps(tmp_path) == [f"ProfilerStep#{i}" for i in range(FIRST, FIRST + STEPS)]


def test_the_budget_scales_with_the_timed_steps() -> None:
    window = ProfilerWindow(Path("."), first_step=FIRST, steps=STEPS)
    assert window.budget_s() is None  # no timed step yet: no budget, nothing is cut
    for wall in (1.0, 1.2, 0.8):
        window.timed_step(wall)
    assert window.budget_s() == pytest.approx(profiler_window.WINDOW_BUDGET_FACTOR * STEPS * 1.0)


def test_a_slow_ratio_with_little_extra_time_per_step_is_not_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny step's fixed profiler cost can exceed the ratio while writing little: only
    SLOW_STEP_MIN_EXTRA_S more per step counts as Python-heavy (here: 1 s, never reached)."""
    monkeypatch.setattr(profiler_window, "SLOW_STEP_MIN_EXTRA_S", 1.0)
    window = run_window(tmp_path, step_s=0.05)  # 50x the timed steps, 49 ms extra each
    assert "dropped_steps" not in window.info
    assert len(profiler_steps(tmp_path)) == STEPS
