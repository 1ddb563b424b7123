"""CommWatch.step_ms: the union of collective intervals inside a step, carried across steps."""

from __future__ import annotations

from perfdoctor.collect.comm_watch import CommWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed(watch: CommWatch, clock: Clock, start: float, end: float) -> None:
    clock.now = start
    t0 = clock()
    clock.now = end
    watch._add(t0)


def test_nothing_timed_is_not_measured_then_overlaps_count_once() -> None:
    clock = Clock()
    watch = CommWatch(torch=None, clock=clock)
    assert watch.step_ms(0.0, 1.0) is None  # no collective yet: no process group
    timed(watch, clock, 0.1, 0.3)
    timed(watch, clock, 0.2, 0.4)  # overlaps the first: 0.1..0.4
    timed(watch, clock, 0.5, 0.6)
    assert watch.step_ms(0.0, 1.0) == 400.0
    assert watch.step_ms(1.0, 2.0) == 0.0  # a step without collectives


def test_an_interval_across_the_step_end_counts_in_both_steps() -> None:
    clock = Clock()
    watch = CommWatch(torch=None, clock=clock)
    timed(watch, clock, 0.9, 1.2)
    assert watch.step_ms(0.0, 1.0) == 100.0
    assert watch.step_ms(1.0, 2.0) == 200.0
