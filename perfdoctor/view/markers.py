"""perfdoctor's own step records as Chrome trace events, on a "perfdoctor" track of the trace.

Pure: steps.jsonl rows and the trace's ProfilerStep#N spans in, trace events (plain dicts)
out. `ProfilerStep#N` in a perfdoctor trace is step N of steps.jsonl
(collect/profiler_window.py), so the steps the profiler recorded sit exactly on their spans.
The steps before the window (warm-up, timed: no profiler ran then) are not in the trace at
all; they are laid back to back before the first recorded step from their measured wall
times, and each such event says so in its args ("placed"), so nobody reads them as recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.model import StepRecord

# The track's process: a string pid no kineto trace uses (theirs are numbers or "Spans"),
# sorted above the trace's own processes.
TRACK_PID = "perfdoctor"
TRACK_SORT_INDEX = -1_000_000
PHASES_TID = 1
STEPS_TID = 2
BLOCKS_TID = 3
THREAD_NAMES = {PHASES_TID: "phases", STEPS_TID: "steps", BLOCKS_TID: "A/B blocks"}

PHASE_TITLES = {
    "warmup": "warm-up (not measured)",
    "timed": "timed steps (no profiler)",
    "profiler_warmup": "profiler warm-up",
    "profiled": "profiled window",
}
PLACED_RECORDED = "on the trace's ProfilerStep#{n} span"
PLACED_LAID = "laid back to back from steps.jsonl wall times (not in the trace: no profiler ran)"
_STEP_ARGS = (
    "wall_ms",
    "device_ms",
    "data_wait_ms",
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "comm_ms",
    "micro_batches",
    "loss",
    "batch_size",
    "arm",
)


@dataclass(frozen=True)
class Span:
    """Where one step sits on the trace's clock, in µs."""

    start_us: float
    dur_us: float
    recorded: bool  # True: a ProfilerStep span of the trace; False: laid from wall times

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class Markers:
    events: tuple[dict[str, Any], ...]
    note: str  # one line for the terminal: what the track shows, or why it is empty


def place_steps(
    steps: Sequence[StepRecord],
    recorded: Mapping[int, tuple[float, float]],
    origin_us: float | None = None,
) -> dict[int, Span]:
    """Each step's span on the trace's clock. `recorded`: step number -> (start µs, dur µs)
    of its ProfilerStep span. Steps before the first recorded one are laid backwards from
    it, later unrecorded ones forwards from the step before. With nothing recorded: every
    step laid forwards from `origin_us` (a run without a trace, shown alone), or {} (no clock
    to place anything on)."""
    ordered = sorted({s.index: s for s in steps}.values(), key=lambda s: s.index)
    anchored = [i for i, s in enumerate(ordered) if s.index in recorded]
    if not anchored:
        if origin_us is None or not ordered:
            return {}
        spans: dict[int, Span] = {}
        cursor = origin_us
        for step in ordered:
            dur_us = max(step.wall_ms, 0.0) * 1000.0
            spans[step.index] = Span(cursor, dur_us, False)
            cursor += dur_us
        return spans
    spans = {}
    first = anchored[0]
    start, dur = recorded[ordered[first].index]
    spans[ordered[first].index] = Span(start, dur, True)
    cursor = start
    for step in reversed(ordered[:first]):
        dur_us = max(step.wall_ms, 0.0) * 1000.0
        cursor -= dur_us
        spans[step.index] = Span(cursor, dur_us, False)
    previous = spans[ordered[first].index]
    for step in ordered[first + 1 :]:
        if step.index in recorded:
            start, dur = recorded[step.index]
            span = Span(start, dur, True)
        else:
            span = Span(previous.end_us, max(step.wall_ms, 0.0) * 1000.0, False)
        spans[step.index] = span
        previous = span
    return spans


def build_markers(
    steps: Sequence[StepRecord],
    recorded: Mapping[int, tuple[float, float]],
    origin_us: float | None = None,
) -> Markers:
    """The perfdoctor track: phases, one slice per step, A/B blocks, and a global instant
    (a line across every track) where each phase starts. `origin_us`: see place_steps."""
    if not steps:
        return Markers((), "no perfdoctor step records beside this trace: no step markers")
    spans = place_steps(steps, recorded, origin_us)
    if not spans:
        return Markers(
            (),
            "the trace has no ProfilerStep#N span of a recorded step: perfdoctor's steps "
            "cannot be placed on its clock, no step markers",
        )
    ordered = [s for s in sorted(steps, key=lambda s: s.index) if s.index in spans]
    events: list[dict[str, Any]] = [*_metadata()]
    for phase, group in _runs(ordered, lambda s: s.phase):
        events.extend(_phase_events(phase, group, spans))
    events.extend(_step_event(step, spans[step.index]) for step in ordered)
    blocks = [(arm, group) for arm, group in _runs(ordered, lambda s: s.arm) if arm is not None]
    for k, (arm, group) in enumerate(blocks, start=1):
        events.append(_block_event(k, arm, group, spans))
    recorded_n = sum(1 for s in ordered if spans[s.index].recorded)
    note = (
        f"perfdoctor track: {len(ordered)} steps ({recorded_n} on the trace's ProfilerStep "
        f"spans, {len(ordered) - recorded_n} laid from their wall times)"
        + (f", {len(blocks)} A/B blocks" if blocks else "")
    )
    return Markers(tuple(events), note)


def _metadata() -> list[dict[str, Any]]:
    meta: list[dict[str, Any]] = [
        _meta("process_name", None, {"name": "perfdoctor (steps.jsonl)"}),
        _meta("process_sort_index", None, {"sort_index": TRACK_SORT_INDEX}),
    ]
    for tid, name in THREAD_NAMES.items():
        meta.append(_meta("thread_name", tid, {"name": name}))
        meta.append(_meta("thread_sort_index", tid, {"sort_index": tid}))
    return meta


def _meta(name: str, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": TRACK_PID, "tid": tid or 0, "args": args}


def _runs(
    steps: Sequence[StepRecord], key: Callable[[StepRecord], Any]
) -> list[tuple[Any, list[StepRecord]]]:
    """Consecutive steps with the same key, in order."""
    runs: list[tuple[Any, list[StepRecord]]] = []
    for step in steps:
        value = key(step)
        if runs and runs[-1][0] == value and runs[-1][1][-1].index == step.index - 1:
            runs[-1][1].append(step)
        else:
            runs.append((value, [step]))
    return runs


def _steps_label(group: Sequence[StepRecord]) -> str:
    first, last = group[0].index, group[-1].index
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _phase_events(
    phase: str, group: Sequence[StepRecord], spans: Mapping[int, Span]
) -> list[dict[str, Any]]:
    start = spans[group[0].index].start_us
    end = spans[group[-1].index].end_us
    title = f"{PHASE_TITLES.get(phase, phase)}: {_steps_label(group)}"
    p50 = _median([s.step_ms for s in group])
    args: dict[str, Any] = {
        "phase": phase,
        "steps": len(group),
        "step_ms_p50": round(p50, 3) if p50 is not None else None,
        "placed": _placement(group, spans),
    }
    return [
        {
            "ph": "X",
            "name": title,
            "cat": "perfdoctor",
            "pid": TRACK_PID,
            "tid": PHASES_TID,
            "ts": start,
            "dur": max(end - start, 0.0),
            "args": args,
        },
        # A global instant: a line across every track where the phase starts.
        {
            "ph": "i",
            "s": "g",
            "name": f"perfdoctor: {title} starts",
            "cat": "perfdoctor",
            "pid": TRACK_PID,
            "tid": PHASES_TID,
            "ts": start,
            "args": {"phase": phase},
        },
    ]


def _placement(group: Sequence[StepRecord], spans: Mapping[int, Span]) -> str:
    recorded = [spans[s.index].recorded for s in group]
    if all(recorded):
        return "on the trace's ProfilerStep spans"
    if not any(recorded):
        return PLACED_LAID
    return "partly on ProfilerStep spans, partly laid from steps.jsonl wall times"


def _step_event(step: StepRecord, span: Span) -> dict[str, Any]:
    args: dict[str, Any] = {"phase": step.phase}
    for key in _STEP_ARGS:
        value = getattr(step, key)
        if value is not None:
            args[key] = value
    args["placed"] = PLACED_RECORDED.format(n=step.index) if span.recorded else PLACED_LAID
    return {
        "ph": "X",
        "name": f"step {step.index} ({step.phase})",
        "cat": "perfdoctor",
        "pid": TRACK_PID,
        "tid": STEPS_TID,
        "ts": span.start_us,
        "dur": span.dur_us,
        "args": args,
    }


def _block_event(
    k: int, arm: str, group: Sequence[StepRecord], spans: Mapping[int, Span]
) -> dict[str, Any]:
    start = spans[group[0].index].start_us
    end = spans[group[-1].index].end_us
    p50 = _median([s.step_ms for s in group])
    return {
        "ph": "X",
        "name": f"block {k}: {arm} ({_steps_label(group)})",
        "cat": "perfdoctor",
        "pid": TRACK_PID,
        "tid": BLOCKS_TID,
        "ts": start,
        "dur": max(end - start, 0.0),
        "args": {
            "arm": arm,
            "steps": len(group),
            "step_ms_p50": round(p50, 3) if p50 is not None else None,
            "placed": _placement(group, spans),
        },
    }
