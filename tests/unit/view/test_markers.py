"""The perfdoctor track: steps placed on the trace's ProfilerStep spans, the rest laid from
their wall times, phases and A/B blocks as slices, a global instant where each phase starts."""

from __future__ import annotations

import pytest

from perfdoctor.model import StepRecord
from perfdoctor.view.markers import (
    BLOCKS_TID,
    PHASES_TID,
    PLACED_LAID,
    STEPS_TID,
    TRACK_PID,
    build_markers,
    place_steps,
)


def _steps(*phases: str, wall_ms: float = 10.0, arms: tuple[str | None, ...] = ()) -> list:
    arms = arms or (None,) * len(phases)
    return [
        StepRecord(index=i, phase=p, wall_ms=wall_ms + i, arm=a)  # type: ignore[arg-type]
        for i, (p, a) in enumerate(zip(phases, arms, strict=True))
    ]


def test_steps_before_the_window_are_laid_back_to_back_from_their_wall_times():
    steps = _steps("warmup", "timed", "timed", "profiled", "profiled")
    spans = place_steps(steps, {3: (1_000_000.0, 5_000.0), 4: (1_006_000.0, 4_000.0)})
    assert spans[3].recorded and spans[4].recorded
    assert (spans[4].start_us, spans[4].dur_us) == (1_006_000.0, 4_000.0)
    # Step 2 (12 ms) ends where step 3 starts; step 1 (11 ms) where step 2 starts; ...
    assert spans[2].end_us == pytest.approx(1_000_000.0)
    assert spans[2].dur_us == pytest.approx(12_000.0)
    assert spans[1].end_us == pytest.approx(spans[2].start_us)
    assert spans[0].start_us == pytest.approx(1_000_000.0 - (10 + 11 + 12) * 1000.0)
    assert not any(spans[i].recorded for i in range(3))


def test_steps_after_the_last_recorded_one_follow_it():
    steps = _steps("profiled", "timed")
    spans = place_steps(steps, {0: (100.0, 50.0)})
    assert spans[1].start_us == 150.0 and spans[1].dur_us == pytest.approx(11_000.0)


def test_no_recorded_step_means_no_clock_and_no_markers():
    steps = _steps("warmup", "timed")
    assert place_steps(steps, {}) == {}
    markers = build_markers(steps, {7: (0.0, 1.0)})  # a span of a step steps.jsonl lacks
    assert markers.events == ()
    assert "cannot be placed" in markers.note


def test_no_steps_no_markers():
    markers = build_markers([], {1: (0.0, 1.0)})
    assert markers.events == () and "no perfdoctor step records" in markers.note


def _on(events, tid, ph="X"):
    return [e for e in events if e["tid"] == tid and e["ph"] == ph and e["pid"] == TRACK_PID]


def test_phases_steps_and_instants():
    steps = _steps("warmup", "warmup", "timed", "timed", "timed", "profiled")
    markers = build_markers(steps, {5: (1e6, 15_000.0)})
    phases = _on(markers.events, PHASES_TID)
    assert [p["name"] for p in phases] == [
        "warm-up (not measured): steps 0-1",
        "timed steps (no profiler): steps 2-4",
        "profiled window: step 5",
    ]
    assert phases[1]["args"]["step_ms_p50"] == 13.0  # 12, 13, 14 ms
    assert phases[1]["args"]["placed"] == PLACED_LAID
    assert phases[2]["args"]["placed"] == "on the trace's ProfilerStep spans"
    instants = _on(markers.events, PHASES_TID, "i")
    assert [e["s"] for e in instants] == ["g"] * 3
    assert [e["ts"] for e in instants] == [p["ts"] for p in phases]
    per_step = _on(markers.events, STEPS_TID)
    assert [e["name"] for e in per_step][-1] == "step 5 (profiled)"
    assert per_step[-1]["args"]["placed"] == "on the trace's ProfilerStep#5 span"
    assert per_step[-1]["args"]["wall_ms"] == 15.0
    assert "arm" not in per_step[-1]["args"]  # None values are left out
    names = {e["name"] for e in markers.events if e["ph"] == "M"}
    assert {"process_name", "process_sort_index", "thread_name"} <= names
    assert "6 steps (1 on the trace's ProfilerStep spans, 5 laid" in markers.note


def test_ab_blocks_are_the_runs_of_one_arm():
    arms = (None, "baseline", "baseline", "compile", "compile", "baseline")
    steps = _steps("warmup", "timed", "timed", "timed", "timed", "timed", arms=arms)
    markers = build_markers(steps, {5: (1e6, 15_000.0)})
    blocks = _on(markers.events, BLOCKS_TID)
    assert [b["name"] for b in blocks] == [
        "block 1: baseline (steps 1-2)",
        "block 2: compile (steps 3-4)",
        "block 3: baseline (step 5)",
    ]
    assert blocks[1]["args"]["arm"] == "compile"
    assert "3 A/B blocks" in markers.note
