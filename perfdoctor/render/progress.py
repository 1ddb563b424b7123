"""The live display of `perfdoctor profile`: which run, which step, elapsed time and ETA.

On a terminal it is a rich progress bar; elsewhere (CI logs, pipes) one plain line per run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from perfdoctor.model import RunManifest
from perfdoctor.pipeline import ProgressSink, RunAnnouncement


def _run_name(run: RunAnnouncement) -> str:
    repeat = f" #{run.repeat}" if run.repeat > 1 else ""
    profiled = " +profiler" if run.profiled else ""
    if run.extra_round is not None:
        # Extra rounds are added one at a time: a "run N/total" would grow with each.
        where = f"extra round {run.extra_round} of up to {run.max_rounds}: run {run.number}"
    else:
        where = f"run {run.number}/{run.planned_runs}"
    if run.ab_budget_s is not None:
        arms = ", ".join(run.ab_arms)
        return f"{where} in-process A/B ({arms}; up to {run.ab_budget_s:g}s of measurement)"
    return f"{where} {run.label}{repeat}{profiled}"


def _left(run: RunAnnouncement) -> str:
    if run.session_left_s is None:
        return ""
    return f" · session ~{run.session_left_s:.0f}s left"


def _steps(run: RunAnnouncement, manifest: RunManifest) -> str:
    ran_on = run.run_to_end and manifest.plan_complete and manifest.stopped_at is None
    if not ran_on or manifest.steps_seen < run.planned_steps:
        return f"{manifest.steps_seen} steps"
    # The step rows stop at the plan's end; past it the script runs on, so their count is no
    # count of the steps it ran in all: that is steps_run, when the child counted them.
    measured = f"{run.planned_steps} planned steps measured, then the script ran on to its end"
    in_all = manifest.steps_run or manifest.steps_seen
    if in_all > run.planned_steps:
        measured += f" ({in_all} steps in all)"
    return measured


def _outcome(run: RunAnnouncement, manifest: RunManifest) -> str:
    return f"{manifest.status}, {_steps(run, manifest)} in {manifest.wall_s:.1f}s" + (
        f", exit {manifest.exit_code}" if manifest.exit_code else ""
    )


class LiveSink(ProgressSink):
    """A bar per session: the current run's steps, with elapsed time and ETA."""

    def __init__(self, console: Console, progress: Progress) -> None:
        self.console = console
        self.progress = progress
        self.task = progress.add_task("starting", total=None)
        self.started_at = time.monotonic()

    def run_started(self, run: RunAnnouncement) -> None:
        # An A/B run ends when its verdicts are in: its steps are not known ahead.
        total = None if run.ab_budget_s is not None else run.planned_steps
        self.progress.reset(self.task, total=total, description=_run_name(run) + _left(run))

    def step(self, progress: object) -> None:
        step = getattr(progress, "step", None)
        phase = getattr(progress, "phase", "")
        note = getattr(progress, "note", None)
        if step is not None:
            self.progress.update(self.task, completed=step + 1)
        if phase or note:
            description = self.progress.tasks[0].description.split(" [")[0]
            self.progress.update(self.task, description=f"{description} [{note or phase}]")

    def run_finished(self, run: RunAnnouncement, manifest: RunManifest) -> None:
        self.console.print(f"  {_run_name(run)}: {_outcome(run, manifest)}", markup=False)

    def note(self, message: str) -> None:
        self.console.print(f"  {message}", markup=False)


class PlainSink(ProgressSink):
    """One line per run, for logs and pipes."""

    # An A/B run's state is printed at most this often (one line each), for logs.
    NOTE_EVERY_S = 10.0

    def __init__(self, console: Console) -> None:
        self.console = console
        self._noted_at = 0.0

    def run_started(self, run: RunAnnouncement) -> None:
        self.console.print(f"perfdoctor: {_run_name(run)}{_left(run)} ...", markup=False)
        self._noted_at = time.monotonic()

    def step(self, progress: object) -> None:
        note = getattr(progress, "note", None)
        now = time.monotonic()
        if note and now - self._noted_at >= self.NOTE_EVERY_S:
            self._noted_at = now
            self.console.print(f"perfdoctor:   A/B so far: {note}", markup=False)

    def run_finished(self, run: RunAnnouncement, manifest: RunManifest) -> None:
        self.console.print(f"perfdoctor: {_run_name(run)}: {_outcome(run, manifest)}", markup=False)

    def note(self, message: str) -> None:
        self.console.print(f"perfdoctor: {message}", markup=False)


# Starts every line of JsonLinesSink: the reader tells them from the script's own output.
JSON_PROGRESS_PREFIX = "perfdoctor-progress: "


class JsonLinesSink(ProgressSink):
    """One JSON object per event on stderr, for a program that drives `perfdoctor profile`
    (the MCP server turns them into progress notifications). Steps are sent at most every
    STEP_EVERY_S, so a fast script does not flood the pipe."""

    STEP_EVERY_S = 0.5

    def __init__(self, stream=None) -> None:
        self._stream = stream
        self._sent_at = 0.0
        self._reader_gone = False

    def _send(self, event: str, **fields: object) -> None:
        if self._reader_gone:
            return
        stream = self._stream or sys.stderr
        try:
            stream.write(JSON_PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
            stream.flush()
        except (OSError, ValueError):
            # The reader is gone (its pipe closed): the run goes on, and its report is
            # written all the same.
            self._reader_gone = True

    def run_started(self, run: RunAnnouncement) -> None:
        self._send(
            "run_started",
            label=run.label,
            description=_run_name(run),
            number=run.number,
            planned_runs=run.planned_runs,
            planned_steps=run.planned_steps,
            ab_arms=list(run.ab_arms),
            session_left_s=run.session_left_s,
        )

    def step(self, progress: object) -> None:
        now = time.monotonic()
        if now - self._sent_at < self.STEP_EVERY_S:
            return
        self._sent_at = now
        self._send(
            "step",
            label=getattr(progress, "label", None),
            step=getattr(progress, "step", None),
            planned_steps=getattr(progress, "planned_steps", None),
            phase=getattr(progress, "phase", ""),
            note=getattr(progress, "note", None),  # in-process A/B: the pairs so far
            elapsed_s=getattr(progress, "elapsed_s", None),
        )

    def run_finished(self, run: RunAnnouncement, manifest: RunManifest) -> None:
        self._send(
            "run_finished",
            label=run.label,
            number=run.number,
            planned_runs=run.planned_runs,
            status=manifest.status,
            steps_seen=manifest.steps_seen,
            wall_s=manifest.wall_s,
        )

    def note(self, message: str) -> None:
        self._send("note", message=message)


@contextmanager
def make_progress_sink(console: Console, as_json: bool = False) -> Iterator[ProgressSink]:
    if as_json:
        yield JsonLinesSink()
        return
    if not console.is_terminal:
        yield PlainSink(console)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        yield LiveSink(console, progress)
