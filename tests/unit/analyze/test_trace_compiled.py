"""Eager time between compiled graphs, charged to the break that caused it
(analyze/trace_compiled.py), on a hand-written trace shaped like a real one: nested
`Torch-Compiled Region` spans (a resume frame runs inside the frame that broke), graph calls
as user annotations, compiled backward graphs in reverse order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.trace_compiled import ENTRY, compiled_regions
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.analyze.trace_index import find_steps


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _graph(ts: float, dur: float) -> dict[str, Any]:
    return _x(f"## Call CompiledFxGraph f{int(ts)} ##", ts, dur, "user_annotation")


def _step(offset: float, number: int) -> list[dict[str, Any]]:
    def at(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
        return _x(name, offset + ts, dur, cat)

    return [
        at(f"ProfilerStep#{number}", 0, 10_000, "user_annotation"),
        at("Torch-Compiled Region: 0/0", 100, 5_000),  # forward, breaks at .item()
        at("CompiledFunction", 200, 950),
        _graph(offset + 200, 900),  # 0/0's graph ends at 1100
        at("Torch-Compiled Region: 1/0", 1_400, 3_600),  # resume frame, breaks again
        at("CompiledFunction", 1_500, 2_000),
        _graph(offset + 1_500, 2_000),  # ends at 3500; then 1000 us of eager helper
        at("Torch-Compiled Region: 2/0", 4_500, 500),  # the last resume frame
        at("CompiledFunction", 4_550, 400),
        _graph(offset + 4_550, 400),
        # backward: graphs in reverse order, autograd between them
        at("autograd::engine::evaluate_function: CompiledFunctionBackward", 6_000, 500),
        at("CompiledFunctionBackward", 6_000, 500),
        at("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 6_600, 100),
        at("CompiledFunctionBackward", 7_000, 500),
        at("CompiledFunctionBackward", 7_800, 500),
    ]


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_each_break_gets_the_eager_time_after_its_graph_forward_and_backward(
    tmp_path: Path,
) -> None:
    events = _step(0, 1) + _step(20_000, 2)
    ev = parse_trace(_write(tmp_path, events))
    found = compiled_regions(ev, find_steps(ev))
    assert found is not None
    assert found.steps == 2
    eager = found.eager_ms_per_step
    # 0/0: 1100->1400 after its graph, 1400->1500 entering its resume frame, 5000->5100
    # after the resume returns; backward 7500->7800 between the graphs it separates.
    assert eager["0/0"] == pytest.approx(0.8)
    # 1/0: 3500->4500 (the helper), 4500->4550 entering 2/0; backward 6500->7000 less
    # the 100 us of AccumulateGrad (it runs with or without a break).
    assert eager["1/0"] == pytest.approx(1.45)
    assert eager["2/0"] == pytest.approx(0.05)  # its return path: no break there
    assert eager[ENTRY] == pytest.approx(0.1)  # guards of the first frame
    assert found.entries_per_step == {"0/0": 1.0, "1/0": 1.0, "2/0": 1.0}
    assert found.compiled_ms_per_step == pytest.approx(3.3)
    assert found.backward_unattributed_ms_per_step == 0.0


def test_compile_time_inside_a_step_is_not_eager(tmp_path: Path) -> None:
    events = _step(0, 1)
    # A recompile of the resume frame inside the step: 3600->4400 is compiling, not code.
    events.append(_x("_compile.compile_inner (dynamo_timed)", 3_600, 800))
    ev = parse_trace(_write(tmp_path, events))
    found = compiled_regions(ev, find_steps(ev))
    assert found is not None
    assert found.eager_ms_per_step["1/0"] == pytest.approx(1.45 - 0.8)


def test_a_trace_without_compiled_regions_gives_none(tmp_path: Path) -> None:
    events = [_x("ProfilerStep#1", 0, 100, "user_annotation"), _x("aten::mm", 10, 20)]
    ev = parse_trace(_write(tmp_path, events))
    assert compiled_regions(ev, find_steps(ev)) is None
