"""The plain progress lines of `perfdoctor profile` (logs and pipes): what a finished run
says about the steps it ran."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from perfdoctor.model import RunManifest
from perfdoctor.pipeline import RunAnnouncement
from perfdoctor.render.progress import PlainSink

RUN = RunAnnouncement(
    label="baseline", repeat=1, number=1, planned_runs=1, planned_steps=17, profiled=True
)
DONE = RunManifest(
    label="baseline",
    status="completed",
    exit_code=0,
    wall_s=12.34,
    steps_seen=17,
    step_detection="optimizer",
    plan_complete=True,
)


def finished_line(run: RunAnnouncement, manifest: RunManifest) -> str:
    out = io.StringIO()
    PlainSink(Console(file=out, width=300)).run_finished(run, manifest)
    return out.getvalue().strip()


def test_a_stopped_run_counts_its_steps() -> None:
    stopped = replace(DONE, stopped_at={"step": 17})
    line = finished_line(RUN, stopped)
    assert line == "perfdoctor: run 1/1 baseline +profiler: completed, 17 steps in 12.3s"


def test_run_to_end_says_the_plan_was_measured_not_a_wrong_step_count() -> None:
    """--run-to-end: the child counts steps only up to its plan's end, then the script runs
    on uncounted, so "17 steps" would understate what it ran."""
    line = finished_line(replace(RUN, run_to_end=True), DONE)
    assert "completed, 17 planned steps measured, then the script ran on to its end" in line
    assert "completed, 17 steps" not in line
    # Where the child counted the steps to the script's end, the count in all is given.
    line = finished_line(replace(RUN, run_to_end=True), replace(DONE, steps_run=80))
    assert "ran on to its end (80 steps in all) in 12.3s" in line


def test_run_to_end_that_crashed_before_the_plan_counts_its_steps() -> None:
    crashed = replace(DONE, status="script_crashed", exit_code=1, steps_seen=4)
    crashed = replace(crashed, plan_complete=False)
    line = finished_line(replace(RUN, run_to_end=True), crashed)
    assert line.endswith("script_crashed, 4 steps in 12.3s, exit 1")
