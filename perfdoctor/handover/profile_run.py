"""The MCP `profile` tool's run: `perfdoctor profile` in a child process, its progress read
from its JSON progress lines, and a cancel that stops it the way Ctrl-C does.

A subprocess, not the pipeline in the server's own process: the launcher's signal handling
(cli_guard.stop_signals_as_interrupts) lives in a main thread, and a cancel must stop the
script's whole process tree and still leave the partial report. SIGTERM to `perfdoctor
profile` does exactly that (exit 143, README "Exit codes"); the child is the leader of its
own process group, so a last SIGKILL of that group reaches whatever is left of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfdoctor.render.progress import JSON_PROGRESS_PREFIX
from perfdoctor.rundir import LATEST_LINK, SESSION_FILE

log = logging.getLogger(__name__)

# How long a cancelled `perfdoctor profile` has to stop its script (the launcher's own grace
# period is shorter) and write the partial report before its process group is killed.
STOP_GRACE_S = 60.0
# stderr lines kept to explain a failure (the script's output is not echoed: --quiet).
KEPT_LINES = 40

ProgressFn = Callable[[float, float | None, str], Awaitable[None]]


@dataclass(frozen=True)
class ProfileRequest:
    script: Path
    args: tuple[str, ...] = ()
    cwd: Path | None = None
    out: Path = Path("perfdoctor-runs")
    steps: int | None = None
    warmup: int | None = None
    profile_steps: int | None = None
    apply: bool = True
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    repeat: int | None = None
    ab_budget_s: float | None = None
    timeout_s: float | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "perfdoctor", "profile", "--out", str(self.out)]
        cmd += ["--json", "--quiet", "--progress-json"]
        for option, value in (
            ("--steps", self.steps),
            ("--warmup", self.warmup),
            ("--profile-steps", self.profile_steps),
            ("--repeat", self.repeat),
            ("--ab-budget", self.ab_budget_s),
            ("--timeout", self.timeout_s),
        ):
            if value is not None:
                cmd += [option, f"{value:g}" if isinstance(value, float) else str(value)]
        cmd.append("--apply" if self.apply else "--no-apply")
        if self.only:
            cmd += ["--only", ",".join(self.only)]
        if self.skip:
            cmd += ["--skip", ",".join(self.skip)]
        return [*cmd, str(self.script), *self.args]


@dataclass
class ProfileResult:
    exit_code: int
    session_dir: Path | None
    stderr_tail: list[str] = field(default_factory=list)


class ProgressState:
    """The stage, the runs done, the A/B pairs so far and the ETA, from the progress lines."""

    def __init__(self) -> None:
        self.stage = "starting"
        self.runs_done = 0
        self.planned_runs = 1
        self.step: int | None = None
        self.planned_steps: int | None = None
        self.pairs: str | None = None
        self.left_s: float | None = None
        self._left_at = time.monotonic()
        self.notes: list[str] = []

    def update(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "run_started":
            self.stage = str(event.get("description") or event.get("label"))
            self.planned_runs = max(int(event.get("planned_runs") or 1), self.runs_done + 1)
            self.step, self.planned_steps = None, event.get("planned_steps")
            self.pairs = None
            left = event.get("session_left_s")
            if isinstance(left, (int, float)):
                self.left_s, self._left_at = float(left), time.monotonic()
        elif kind == "step":
            self.step = event.get("step")
            if event.get("note"):
                self.pairs = str(event["note"])
        elif kind == "run_finished":
            self.runs_done += 1
            self.stage = f"{event.get('label')} {event.get('status')}"
        elif kind == "note":
            self.notes.append(str(event.get("message")))
            self.stage = str(event.get("message"))

    @property
    def progress(self) -> float:
        within = 0.0
        if (
            isinstance(self.step, int)
            and isinstance(self.planned_steps, int)
            and self.planned_steps
        ):
            within = min(self.step / self.planned_steps, 0.99)
        return self.runs_done + within

    def eta_s(self) -> float | None:
        if self.left_s is None:
            return None
        return max(0.0, self.left_s - (time.monotonic() - self._left_at))

    def message(self) -> str:
        parts = [f"stage: {self.stage}", f"runs {self.runs_done}/{self.planned_runs}"]
        if self.step is not None:
            parts.append(
                f"step {self.step}" + (f"/{self.planned_steps}" if self.planned_steps else "")
            )
        if self.pairs:
            parts.append(f"pairs so far: {self.pairs}")
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA ~{eta:.0f}s")
        return "; ".join(parts)


# The `perfdoctor profile` processes running now, by pid: the server stops them when it is
# itself stopped by a signal (stop_all), since they run in sessions of their own.
_RUNNING: dict[int, asyncio.subprocess.Process] = {}


def stop_all() -> None:
    """SIGTERM to every running profile: each stops its script and writes its partial report
    on its own, so this returns at once (it runs in a signal handler)."""
    for pid in list(_RUNNING):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def _sessions(out: Path) -> set[Path]:
    if not out.is_dir():
        return set()
    return {p for p in out.iterdir() if p.name != LATEST_LINK and not p.is_symlink() and p.is_dir()}


def _new_session(out: Path, before: set[Path]) -> Path | None:
    made = [p for p in _sessions(out) - before if (p / SESSION_FILE).is_file()]
    if made:
        return max(made, key=lambda p: p.name)
    return None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """As Ctrl-C would: SIGTERM to perfdoctor (it stops the script's tree and writes the
    partial report), then SIGKILL to its process group if it does not end in time."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except asyncio.TimeoutError:
        log.warning("perfdoctor profile did not stop in %.0fs: killing it", STOP_GRACE_S)
        _signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()


async def run_profile(request: ProfileRequest, on_progress: ProgressFn | None) -> ProfileResult:
    """Run the profile to its end (or until this task is cancelled: then stop it, wait for
    its partial report, and re-raise the cancellation)."""
    before = _sessions(request.out)
    proc = await asyncio.create_subprocess_exec(
        *request.command(),
        cwd=str(request.cwd or request.script.parent),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        # Its own process group: a signal meant for the server's group (a terminal's Ctrl-C)
        # does not hit it twice, and a last SIGKILL of its group reaches what it started.
        start_new_session=True,
    )
    _RUNNING[proc.pid] = proc
    state = ProgressState()
    tail: deque[str] = deque(maxlen=KEPT_LINES)
    try:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line.startswith(JSON_PROGRESS_PREFIX):
                tail.append(line)
                continue
            try:
                event = json.loads(line[len(JSON_PROGRESS_PREFIX) :])
            except ValueError:
                continue
            state.update(event)
            if on_progress is not None:
                await on_progress(state.progress, float(state.planned_runs), state.message())
        code = await proc.wait()
    except BaseException:
        # Cancelled (the client's cancel, or the server shutting down): shielded, so the
        # stop and the partial report are not themselves cut short, and the cancellation
        # goes on only once perfdoctor has ended.
        import anyio  # the MCP SDK's event-loop layer, installed with it

        with anyio.CancelScope(shield=True):
            await _stop(proc)
        raise
    finally:
        _RUNNING.pop(proc.pid, None)
    return ProfileResult(code, _new_session(request.out, before), list(tail))
