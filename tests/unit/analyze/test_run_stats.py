"""The one set of run-figure definitions (analyze/run_stats.py) on hand-made steps and runs."""

from __future__ import annotations

import math

import pytest

from perfdoctor.analyze.run_stats import (
    RunSample,
    breakdown_ms,
    cuda_peak_bytes,
    log_half_range,
    peak_memory_bytes,
    peak_rss,
    percentile,
    pool_figures,
    samples_per_step,
    throughput_samples_s,
    timed_step_ms,
)
from perfdoctor.model import StepRecord
from perfdoctor.run_schema import sample_row


def step(index: int, phase: str, wall: float, **kw: object) -> StepRecord:
    return StepRecord(index=index, phase=phase, wall_ms=wall, **kw)  # type: ignore[arg-type]


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 90) == 5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_the_pool_is_the_timed_steps_and_the_slowest_rank_of_each() -> None:
    lead = [step(0, "warmup", 50.0), step(2, "timed", 5.0), step(1, "timed", 6.0),
            step(3, "profiled", 40.0)]  # fmt: skip
    assert timed_step_ms(lead) == [6.0, 5.0]  # step order, warm-up and profiled left out
    other_rank = [step(1, "timed", 4.0), step(2, "timed", 9.0)]
    assert timed_step_ms(lead, [other_rank]) == [6.0, 9.0]


def test_throughput_is_samples_per_step_over_the_median_step() -> None:
    steps = [step(i, "timed", ms, batch_size=8, micro_batches=2) for i, ms in
             enumerate([10.0, 20.0, 1000.0])]  # fmt: skip
    assert samples_per_step(steps) == 16
    assert throughput_samples_s([s.wall_ms for s in steps], 16) == pytest.approx(800.0)
    unknown = [step(0, "timed", 10.0)]
    assert samples_per_step(unknown) is None
    assert samples_per_step(unknown, default_batch=32) == 32  # the DataLoader's batch size
    assert throughput_samples_s([10.0], None) is None


def test_peak_memory_is_the_cuda_peak_else_the_rss_peak() -> None:
    steps = [step(0, "timed", 1.0, rss_bytes=100), step(1, "timed", 1.0, rss_bytes=300)]
    sampled = [
        sample_row({"kind": "cpu", "t": 0.5, "rss_bytes": 350}),
        sample_row({"kind": "gpu", "t": 0.5, "index": 0, "mem_used_bytes": 999}),
    ]
    assert peak_rss(steps, sampled) == 350
    assert cuda_peak_bytes(None, 70, 90, True) == 90  # a bool is no byte count
    assert peak_memory_bytes(90, 350) == 90
    assert peak_memory_bytes(None, 350) == 350


def test_breakdown_leaves_other_as_the_rest_of_the_median_step() -> None:
    shape = [(116.0, 95.0), (20.0, 1.0), (20.0, 1.0)]  # (wall, data wait): one epoch boundary
    steps = [
        step(i, "timed", wall, data_wait_ms=wait, forward_ms=5.0, backward_ms=8.0)
        for i, (wall, wait) in enumerate(shape)
    ]
    assert breakdown_ms(steps) == {
        "data": 1.0, "forward": 5.0, "backward": 8.0, "optimizer": 0.0, "other": 6.0,
    }  # fmt: skip
    assert breakdown_ms([]) == {}


def test_pool_figures_over_several_runs() -> None:
    runs = [
        RunSample("a", (10.0, 12.0), samples_per_step=32, peak_memory_bytes=100,
                  energy_j_per_step=2.0),
        RunSample("a", (14.0,), samples_per_step=32, peak_memory_bytes=300, energy_j_per_step=4.0),
        # It crashed before timing a step: its peak counts, its steps and energy cannot.
        RunSample("a", (), peak_memory_bytes=500, status="completed"),
        RunSample("a", (1.0,), peak_memory_bytes=900, status="script_crashed"),
    ]  # fmt: skip
    figures = pool_figures(runs)
    assert (figures.runs, figures.steps) == (2, 3)
    assert figures.step_ms_p50 == 12.0
    assert figures.step_ms_p90 == pytest.approx(13.6)
    assert figures.throughput_samples_s == pytest.approx(32 * 1000.0 / 12.0)
    assert figures.peak_memory_bytes == 500
    assert figures.energy_j_per_step == 3.0
    assert figures.pooled == "median of 3 steps over 2 runs"
    empty = pool_figures([])
    assert empty.step_ms_p50 is None and empty.throughput_samples_s is None


def test_spread_is_half_the_log_range() -> None:
    assert log_half_range([100.0]) == 0.0
    assert log_half_range([100.0, 121.0]) == pytest.approx(math.log(1.21) / 2)
