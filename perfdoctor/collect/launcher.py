"""Parent side of one child run: spawn, watch, bound, and always leave a manifest behind.

`launch(spec)` writes spec.json, runs the child bootstrap (`perfdoctor.collect.bootstrap`) in its
own process group (so a timeout or Ctrl-C can end DataLoader workers with it), tees the
script's stdout/stderr to the terminal and to stdout.log / stderr.log, tails progress.jsonl
for the live display, samples devices in a thread, and writes manifest.json whatever
happened: success, crash, sys.exit(n), timeout, Ctrl-C, or a child that never started.

The parent never imports torch or the user's script; the run directory contract is
docs/run-directory.md.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from perfdoctor import __version__
from perfdoctor.collect import torchrun, tree_settle
from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.nvml import NvmlSampler
from perfdoctor.collect.sampling import DEFAULT_PERIOD_S, SamplingThread
from perfdoctor.errors import (
    EXIT_INTERRUPTED,
    EXIT_MISSING_TOOL,
    EXIT_TIMEOUT,
    interrupt_exit_code,
    interrupt_name,
)
from perfdoctor.model import AppliedOptimization, DeviceInfo, RunManifest, RunSpec, RunStatus
from perfdoctor.rundir import (
    MANIFEST_FILE,
    MEMORY_SNAPSHOT_FILE,
    OBSERVATIONS_FILE,
    PROCESSES_FILE,
    PROCS_DIR,
    PROGRESS_FILE,
    RANKS_DIR,
    SAMPLES_FILE,
    SPEC_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STEPS_FILE,
    find_traces,
    read_json,
    read_jsonl,
    write_json,
)

logger = logging.getLogger(__name__)

BOOTSTRAP_MODULE = "perfdoctor.collect.bootstrap"
# `python -c` rather than `-m`: no runpy frames above the script's (bootstrap.py's doc says why).
ENTRY_CODE = f"import sys; from {BOOTSTRAP_MODULE} import main; sys.exit(main(sys.argv[1:]))"
# The child measures its step times on the same origin as the parent's samples.
T0_ENV = "PERFDOCTOR_T0_UNIX"
GRACE_S = 10.0  # SIGTERM -> SIGKILL: time for the child's `finally` to flush its artifacts
LEFTOVER_GRACE_S = 2.0  # processes the script left behind after it exited
SELF_EXIT_S = 1.0  # what the script started may still be ending on its own
POLL_S = 0.1
# How often the child's process tree is listed: a descendant that leaves the child's process
# group (setsid, start_new_session) is still stopped with it if it was seen once.
TREE_REFRESH_S = 1.0
_STEP_DETECTIONS = ("optimizer", "backward", "time")
# Profiler chatter from kineto (mechanics §6.4); kept in stderr.log, hidden from the terminal.
_NOISE_PREFIX = b"USDT:"
# c10 warnings that our own profiler window causes, e.g. "[W1122 05:37:49.91 CPUAllocator.cpp:245]
# Memory block of unknown size was allocated before the profiling started ...". Lines that
# start like a c10 log line are held until complete, then dropped from the echo if they match.
_C10_LOG_START = b"[W"
# With a process group, c10 prefixes its lines with the rank: "[rank0]:[W1122 05:37:49 ...".
_RANK_PREFIX = re.compile(rb"\[rank\d+\]:")
_RANK_PREFIX_START = re.compile(rb"\[(?:r(?:a(?:n(?:k(?:\d+(?:\](?::)?)?)?)?)?)?)?")
_PROFILER_WARNINGS = (b"was allocated before the profiling started",)
_STDERR_TAIL_LINES = 40


@dataclass(frozen=True)
class Progress:
    """One step the child reported, for a live display."""

    label: str
    step: int
    phase: str
    planned_steps: int
    elapsed_s: float


def launch(
    spec: RunSpec,
    *,
    timeout_s: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    echo_output: bool = True,
    python: str = sys.executable,
    nproc_per_node: int = 1,
    nodes: torchrun.Nodes | None = None,
) -> RunManifest:
    """Run one child to its end and return (and write) its manifest.

    The target is not validated here: call perfdoctor.collect.target.validate_target first.
    KeyboardInterrupt (Ctrl-C, or perfdoctor.errors.Stopped for SIGTERM/SIGHUP) ends the
    child's whole process tree, writes the manifest with status "interrupted" and is
    re-raised. `nproc_per_node` > 1 runs the script under torchrun with that many ranks
    (perfdoctor.collect.torchrun); every Python process the child starts is instrumented
    (perfdoctor.collect.tree_settle), and the lead trainer's record is this directory's.
    """
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_artifacts(run_dir)
    spec_path = run_dir / SPEC_FILE
    write_json(spec_path, spec)
    watch = _Watch(spec, run_dir, on_progress)
    watch.start_clock()
    env = _child_env(spec, watch.t0_unix)
    # Process tree (collect/tree_settle.py): probes in every Python process the child starts.
    env = tree_settle.tree_env(run_dir, env)
    command = torchrun.root_command(spec, python, nproc_per_node, nodes) or [
        python,
        "-c",
        ENTRY_CODE,
        str(spec_path),
    ]
    try:
        proc = subprocess.Popen(
            command,
            cwd=spec.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killpg reaches its workers
        )
    except OSError as err:
        where = f"working directory {spec.cwd}" if not Path(spec.cwd).is_dir() else python
        failed = _Outcome(spawn_error=f"{where}: {err.strerror or err}")
        return _write_manifest(spec, run_dir, failed, watch)
    proc.perfdoctor_run_dir = run_dir  # type: ignore[attr-defined]  # for _signal_tree
    tees = [
        _Tee(proc.stdout, run_dir / STDOUT_FILE, sys.stdout if echo_output else None),
        _Tee(proc.stderr, run_dir / STDERR_FILE, sys.stderr if echo_output else None),
    ]
    sampler = SamplingThread(
        [NvmlSampler(visible_devices=env.get("CUDA_VISIBLE_DEVICES")), CpuSampler(proc.pid)],
        run_dir / SAMPLES_FILE,
        origin=watch.t0,
        origin_unix=watch.t0_unix,
        period_s=DEFAULT_PERIOD_S,
    )
    outcome = _Outcome()
    tree = _ProcessTree(proc.pid)
    pending: BaseException | None = None
    try:
        for tee in tees:
            tee.start()
        sampler.start()
        outcome = _supervise(proc, watch, timeout_s, tree)
    except BaseException as err:  # KeyboardInterrupt, or a failing on_progress callback
        pending = err
        outcome = _Outcome(interrupted=True)
        if isinstance(err, KeyboardInterrupt):
            outcome.interrupt_code = interrupt_exit_code(err)
            if outcome.interrupt_code != EXIT_INTERRUPTED:
                outcome.internal_error = f"perfdoctor was stopped by {interrupt_name(err)}"
        else:
            outcome.internal_error = f"perfdoctor: {type(err).__name__}: {err}"
        tree.refresh()
        outcome.exit_code = _terminate_group(proc, GRACE_S)
    finally:
        outcome.exit_code = proc.wait() if outcome.exit_code is None else outcome.exit_code
        outcome.wall_s = time.monotonic() - watch.t0
        left_in_group = _end_leftovers(proc.pid)
        if tree.stop_survivors() or left_in_group:
            outcome.warnings.append("processes the script left behind were terminated")
        if tree_settle.end_tree(run_dir, LEFTOVER_GRACE_S):
            outcome.warnings.append("processes of the run still running were terminated")
        outcome.warnings.extend(tree_settle.settle(run_dir))
        sampler.stop()
        for tee in tees:
            if tee.is_alive():
                tee.join(5.0)
        try:
            watch.poll()
        except Exception:  # a failing display must not cost the manifest
            logger.debug("progress callback failed", exc_info=True)
        outcome.stderr_tail = tees[1].tail
        manifest = _write_manifest(spec, run_dir, outcome, watch)
    if pending is not None:
        raise pending
    return manifest


def _write_manifest(
    spec: RunSpec,
    run_dir: Path,
    outcome: _Outcome,
    watch: _Watch,
    adjust: Callable[[RunManifest], RunManifest] | None = None,
) -> RunManifest:
    """`adjust`: a multi-rank run's status follows its first failing rank (collect/ranks.py)."""
    try:
        manifest = _assemble_manifest(spec, run_dir, outcome, watch)
    except Exception:
        # A bug in reading the child's artifacts must not cost the manifest itself.
        logger.exception("could not read the child's artifacts; writing a minimal manifest")
        status, exit_code, error = _classify(outcome, None, watch.rows)
        manifest = RunManifest(
            label=spec.label,
            status=status,
            exit_code=exit_code,
            wall_s=round(outcome.wall_s, 3),
            steps_seen=watch.rows,
            step_detection=None,
            plan_complete=False,
            error=error,
        )
    if adjust is not None:
        manifest = adjust(manifest)
    write_json(run_dir / MANIFEST_FILE, manifest)
    return manifest


# --------------------------------------------------------------------------- supervision


@dataclass
class _Outcome:
    exit_code: int | None = None  # raw child return code (negative: killed by that signal)
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    interrupt_code: int = EXIT_INTERRUPTED  # 130 for Ctrl-C, 128+n for SIGTERM/SIGHUP
    spawn_error: str | None = None
    internal_error: str | None = None
    stderr_tail: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)


def _supervise(
    proc: subprocess.Popen[bytes],
    watch: _Watch,
    timeout_s: float | None,
    tree: _ProcessTree | None = None,
) -> _Outcome:
    while True:
        try:
            code = proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            watch.poll()
            if tree is not None:
                tree.refresh(every_s=TREE_REFRESH_S)
            if timeout_s is not None and time.monotonic() - watch.t0 > timeout_s:
                logger.info("timeout after %.1f s: stopping the child", timeout_s)
                if tree is not None:
                    tree.refresh()
                code = _terminate_group(proc, GRACE_S)
                return _Outcome(exit_code=code, timed_out=True)
            continue
        return _Outcome(exit_code=code)


class _ProcessTree:
    """The child's descendants as last seen, to stop those that left its process group.

    killpg reaches DataLoader workers and everything else that stays in the child's group;
    a descendant that started its own session (a server the script launched with
    start_new_session=True, a daemon) is re-parented to init when the child dies and would
    keep running. psutil.Process remembers each one's start time, so a recycled pid is never
    signalled.
    """

    def __init__(self, root_pid: int) -> None:
        self._root_pid = root_pid
        self._seen: dict[int, Any] = {}
        self._listed_at = float("-inf")

    def refresh(self, every_s: float = 0.0) -> None:
        now = time.monotonic()
        if now - self._listed_at < every_s:
            return
        self._listed_at = now
        try:
            import psutil

            children = psutil.Process(self._root_pid).children(recursive=True)
        except Exception:  # gone already, or no psutil: killpg still covers the group
            return
        for child in children:
            self._seen.setdefault(child.pid, child)

    def stop_survivors(self, grace_s: float = LEFTOVER_GRACE_S) -> bool:
        """SIGTERM, then SIGKILL, every descendant seen that still runs; True if any did."""
        try:
            import psutil
        except ImportError:
            return False
        alive = []
        for process in self._seen.values():
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.Error:
                continue
        if not alive:
            return False
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.terminate()
        _gone, still = psutil.wait_procs(alive, timeout=grace_s)
        for process in still:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(still, timeout=grace_s)
        return True


def _terminate_group(proc: subprocess.Popen[bytes], grace_s: float) -> int:
    """SIGTERM the child's group, give it `grace_s` to flush, then SIGKILL; return its code.

    A second Ctrl-C during the grace period skips the rest of it.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    _signal_tree(proc, signal.SIGTERM)  # ranks in sessions of their own (torchrun)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        logger.info("child ignored SIGTERM for %.0f s: killing it", grace_s)
    except KeyboardInterrupt:
        logger.info("second interrupt: killing the child")
    _signal_group(proc.pid, signal.SIGKILL)
    _signal_tree(proc, signal.SIGKILL)
    return proc.wait()


def _signal_tree(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    run_dir = getattr(proc, "perfdoctor_run_dir", None)
    if run_dir is not None:
        tree_settle.signal_tree(run_dir, sig)


def _end_leftovers(pgid: int) -> bool:
    """End processes still in the child's group (e.g. DataLoader workers); True if any were."""
    if not _group_alive(pgid):
        return False
    # Helpers that end themselves once the script has (multiprocessing's resource tracker
    # sees its pipe close) are not left behind: a moment for them first.
    deadline = time.monotonic() + SELF_EXIT_S
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not _group_alive(pgid):
            return False
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while time.monotonic() < deadline:
        if not _group_alive(pgid):
            return True
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    return True


def _group_alive(pgid: int) -> bool:
    """True while a process of the group runs; zombies waiting for their reaper do not count.

    (kill(0) succeeds on zombies, and in containers whose PID 1 does not reap orphans they
    would make every run look like it left processes behind.)
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        import psutil
    except ImportError:
        return True
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


# --------------------------------------------------------------------------- live progress


class _Watch:
    """Start time of the child, and the progress.jsonl rows it wrote so far."""

    def __init__(
        self, spec: RunSpec, run_dir: Path, on_progress: Callable[[Progress], None] | None
    ) -> None:
        self._spec = spec
        self._path = run_dir / PROGRESS_FILE
        self._on_progress = on_progress
        self._offset = 0
        self.t0 = 0.0
        self.t0_unix = 0.0
        self.rows = 0

    def start_clock(self) -> None:
        """Both clocks read together, just before the spawn: `t` = 0 for parent and child."""
        self.t0_unix = time.time()
        self.t0 = time.monotonic()

    def poll(self) -> None:
        """Read complete new lines only: the child may be halfway through writing one."""
        if self._offset == 0 and not self._path.is_file():
            # Training in processes the child started: follow the first one that steps.
            found = sorted(self._path.parent.glob(f"{PROCS_DIR}/*/{PROGRESS_FILE}"))
            if found:
                self._path = found[0]
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            self.rows += 1
            step = row.get("step")
            if self._on_progress is not None:
                self._on_progress(
                    Progress(
                        label=self._spec.label,
                        step=step if isinstance(step, int) else self.rows,
                        phase=str(row.get("phase", "")),
                        planned_steps=self._spec.plan.total_steps,
                        elapsed_s=round(time.monotonic() - self.t0, 3),
                    )
                )


# --------------------------------------------------------------------------- output tee


class _Tee(threading.Thread):
    """Copies one pipe of the child into a log file (raw) and to the terminal (filtered)."""

    def __init__(self, pipe: IO[bytes] | None, log_path: Path, echo: IO[str] | None) -> None:
        super().__init__(name=f"perfdoctor-tee-{log_path.stem}", daemon=True)
        self._pipe = pipe
        self._log_path = log_path
        self._echo = echo
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._partial = ""
        self._at_line_start = True
        self._held = b""  # the start of a line that may turn out to be profiler noise
        self._dropping = False

    @property
    def tail(self) -> tuple[str, ...]:
        """The last lines the script wrote on this pipe (profiler noise excluded)."""
        return (*self._lines, *([self._partial] if self._partial.strip() else []))

    def run(self) -> None:
        if self._pipe is None:
            return
        fd = self._pipe.fileno()
        with self._log_path.open("wb") as log:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                log.write(chunk)
                log.flush()
                self._filter(chunk)
            if self._held:
                self._emit(self._held)
            self._emit(b"", final=True)
        self._pipe.close()

    def _filter(self, chunk: bytes) -> None:
        for piece in chunk.splitlines(keepends=True):
            if self._at_line_start:
                piece = self._held + piece
                self._held = b""
                complete = piece.endswith((b"\n", b"\r"))
                ranked = _RANK_PREFIX.match(piece)
                probe = piece[ranked.end() :] if ranked else piece
                undecided = not complete and (
                    (len(piece) < len(_NOISE_PREFIX) and _NOISE_PREFIX.startswith(piece))
                    or probe.startswith(_C10_LOG_START)
                    or probe in (_C10_LOG_START[:1], b"")
                    or _RANK_PREFIX_START.fullmatch(piece) is not None
                )
                if undecided:
                    self._held = piece  # wait for more bytes of this line
                    continue
                self._dropping = piece.startswith(_NOISE_PREFIX) or (
                    probe.startswith(_C10_LOG_START)
                    and any(marker in probe for marker in _PROFILER_WARNINGS)
                )
            self._at_line_start = piece.endswith((b"\n", b"\r"))
            if not self._dropping:
                self._emit(piece)

    def _emit(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final=final)
        if not text:
            return
        combined = self._partial + text
        parts = combined.splitlines(keepends=True)
        self._partial = "" if combined.endswith(("\n", "\r")) else parts.pop()
        self._lines.extend(part.rstrip("\r\n") for part in parts)
        if self._echo is not None:
            try:
                self._echo.write(text)
                self._echo.flush()
            except (OSError, ValueError):
                self._echo = None  # the terminal went away (closed pipe); keep logging


# --------------------------------------------------------------------------- child environment


def _child_env(spec: RunSpec, t0_unix: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in spec.env.items()})
    env["PYTHONUNBUFFERED"] = "1"  # the script's prints reach the terminal as they happen
    env[T0_ENV] = repr(t0_unix)
    if not _perfdoctor_installed():
        # A plain checkout: let `-m perfdoctor.collect.bootstrap` import from the cwd it runs in.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _perfdoctor_installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("perfdoctor")
    except metadata.PackageNotFoundError:
        return False
    return True


def _remove_stale_artifacts(run_dir: Path) -> None:
    """A run directory belongs to one child run: never mix in files from an earlier one."""
    names = (
        MANIFEST_FILE,
        OBSERVATIONS_FILE,
        STEPS_FILE,
        PROGRESS_FILE,
        SAMPLES_FILE,
        STDOUT_FILE,
        STDERR_FILE,
        MEMORY_SNAPSHOT_FILE,
    )
    stale = [run_dir / name for name in names] + find_traces(run_dir)
    for path in stale:
        if path.is_file():
            logger.debug("removing stale %s", path)
            path.unlink()
    for sub in (RANKS_DIR, PROCS_DIR):  # the other processes of an earlier run
        if (run_dir / sub).is_dir():
            shutil.rmtree(run_dir / sub, ignore_errors=True)
    (run_dir / PROCESSES_FILE).unlink(missing_ok=True)


# --------------------------------------------------------------------------- the manifest


def _assemble_manifest(
    spec: RunSpec, run_dir: Path, outcome: _Outcome, watch: _Watch
) -> RunManifest:
    observations = _read_observations(run_dir)
    step_rows = sum(1 for _ in read_jsonl(run_dir / STEPS_FILE))
    reported = observations.get("steps_seen") if observations else None
    steps_seen = max(step_rows, watch.rows, reported if isinstance(reported, int) else 0)
    status, exit_code, error = _classify(outcome, observations, steps_seen)
    obs = observations or {}
    detection = obs.get("step_detection")
    plan_complete = bool(
        obs.get("stopped_by_perfdoctor")
        or obs.get("plan_complete")
        or steps_seen >= spec.plan.total_steps
    )
    warnings = [str(w) for w in _as_list(obs.get("warnings"))] + outcome.warnings
    warnings += _collector_failures(spec, obs, run_dir, status)
    if outcome.timed_out:
        warnings.append("the script ran past the timeout and was stopped")
    return RunManifest(
        label=spec.label,
        status=status,
        exit_code=exit_code,
        wall_s=round(outcome.wall_s, 3),
        steps_seen=steps_seen,
        step_detection=detection if detection in _STEP_DETECTIONS else None,
        plan_complete=plan_complete,
        versions=_versions(obs),
        device=_device(obs),
        artifacts=_artifacts(run_dir),
        applied=_applied(obs),
        warnings=tuple(warnings),
        error=error,
        stopped_at=_stopped_at(obs),
    )


def _stopped_at(obs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where the child stopped the script (bootstrap._stop_point); a stop seen without one
    (a sub-process's record) still says that the script was stopped."""
    if not obs.get("stopped_by_perfdoctor"):
        return None
    point = obs.get("stopped_at")
    return dict(point) if isinstance(point, Mapping) else {}


# What a failing collector costs the report, by its key in observations.json.
_COLLECTOR_LOSS = {
    "profiler": "no profiler trace for this run: the rules that need one are skipped",
    "memory_history": "no CUDA memory history for this run",
}


def _collector_failures(
    spec: RunSpec, obs: Mapping[str, Any], run_dir: Path, status: RunStatus
) -> list[str]:
    """One warning per collector that failed in the child (its section of observations.json
    holds an "error"), and one when the profiler was asked for and no trace came back. A
    failing collector never fails the run, so without these the report would read complete.
    """
    warnings = []
    for key, section in obs.items():
        if isinstance(section, Mapping) and section.get("error"):
            loss = _COLLECTOR_LOSS.get(key, "its observations are missing from this run")
            warnings.append(f"{key} failed: {_one_line(section['error'])} ({loss})")
    profiler = obs.get("profiler")
    profiler_failed = isinstance(profiler, Mapping) and bool(profiler.get("error"))
    user_profiled = isinstance(profiler, Mapping) and profiler.get("user_profiler")
    if (
        spec.profile
        and status == "completed"
        and not profiler_failed
        and not user_profiled
        and not find_traces(run_dir)
    ):
        warnings.append(
            "the profiler window ran but wrote no trace: the rules that need one are skipped"
        )
    return warnings + _sampler_failures(run_dir)


# The notes SamplingThread writes when a sampler fails (collect/sampling.py); "NVML
# unavailable" on a machine without a GPU is expected and not among them.
_SAMPLER_FAILURE_NOTES = ("sampler could not start", "sampler stopped")


def _sampler_failures(run_dir: Path) -> list[str]:
    warnings = []
    try:
        with (run_dir / SAMPLES_FILE).open("rb") as fh:
            lines = [line for line in fh if b'"note"' in line]
    except OSError:
        return []
    for line in lines:
        try:
            message = str(json.loads(line).get("message", ""))
        except (ValueError, AttributeError):
            continue
        if message.endswith(_SAMPLER_FAILURE_NOTES):
            warnings.append(f"{message}: the device samples of this run are incomplete")
    return warnings


def _classify(
    outcome: _Outcome, observations: dict[str, Any] | None, steps_seen: int
) -> tuple[RunStatus, int, str | None]:
    """(status, exit code, one-line error) from how the child ended and what it wrote."""
    obs = observations or {}
    script_error = _one_line(obs.get("error"))
    if outcome.spawn_error is not None:
        error = f"could not start the child: {outcome.spawn_error}"
        return "launch_failed", EXIT_MISSING_TOOL, error
    if outcome.interrupted:
        return "interrupted", outcome.interrupt_code, outcome.internal_error or script_error
    if outcome.timed_out:
        return "timeout", EXIT_TIMEOUT, script_error
    code = outcome.exit_code if outcome.exit_code is not None else 1
    if code < 0:  # killed by a signal nobody in perfdoctor sent (OOM killer, kill -9, ...)
        name = _signal_name(-code)
        error = f"killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
        status: RunStatus = "script_crashed" if observations or steps_seen else "launch_failed"
        return status, 128 - code, error
    if obs.get("launch_error"):
        return "launch_failed", code or 1, _one_line(obs.get("launch_error"))
    if code == 0:
        # The plan done: perfdoctor stopped the script, or it ran on to its end (--run-to-end).
        done = obs.get("stopped_by_perfdoctor") or obs.get("plan_complete")
        status = "completed" if done else "finished_early"
        return status, 0, None
    if observations is None and steps_seen == 0:
        # The child died before the bootstrap got going (broken environment, import error).
        return "launch_failed", code, _last_error_line(outcome.stderr_tail)
    if script_error is not None:
        return "script_crashed", code, script_error
    if observations is None and _has_traceback(outcome.stderr_tail):
        return "script_crashed", code, _last_error_line(outcome.stderr_tail)
    return "script_exited", code, None


def _read_observations(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = read_json(run_dir / OBSERVATIONS_FILE)
    except (OSError, ValueError):
        return None  # missing, or torn by a killed child
    return data if isinstance(data, dict) else None


def _versions(obs: Mapping[str, Any]) -> dict[str, str]:
    versions: dict[str, str] = {}
    reported = obs.get("versions")
    if isinstance(reported, Mapping):
        versions.update({str(k): str(v) for k, v in reported.items() if v is not None})
    torch_info = obs.get("torch")
    if "torch" not in versions and isinstance(torch_info, Mapping) and torch_info.get("version"):
        versions["torch"] = str(torch_info["version"])
    versions.setdefault("python", platform.python_version())
    versions.setdefault("perfdoctor", __version__)
    return versions


def _device(obs: Mapping[str, Any]) -> DeviceInfo | None:
    device = obs.get("device")
    if not isinstance(device, Mapping) or device.get("kind") not in ("cpu", "cuda"):
        return None
    known = {f.name for f in fields(DeviceInfo)}
    values = {k: v for k, v in device.items() if k in known}
    values.setdefault("name", "")
    cpu = obs.get("cpu")
    if isinstance(cpu, Mapping):
        values.setdefault("cpu_cores_logical", cpu.get("logical_cores"))
        values.setdefault("cpu_cores_physical", cpu.get("physical_cores"))
    try:
        return DeviceInfo(**values)
    except TypeError:
        return None


def _applied(obs: Mapping[str, Any]) -> tuple[AppliedOptimization, ...]:
    applied = []
    for entry in _as_list(obs.get("applied")):
        if not isinstance(entry, Mapping) or "id" not in entry:
            continue
        applied.append(
            AppliedOptimization(
                id=str(entry["id"]),
                applied=bool(entry.get("applied")),
                verified=bool(entry.get("verified")),
                detail=str(entry.get("detail", "")),
            )
        )
    return tuple(applied)


def _artifacts(run_dir: Path) -> dict[str, str]:
    """Artifact id -> path relative to the run directory, for the files that exist."""
    named = {
        "spec": SPEC_FILE,
        "observations": OBSERVATIONS_FILE,
        "steps": STEPS_FILE,
        "progress": PROGRESS_FILE,
        "samples": SAMPLES_FILE,
        "stdout": STDOUT_FILE,
        "stderr": STDERR_FILE,
        "memory_snapshot": MEMORY_SNAPSHOT_FILE,
    }
    found = {key: name for key, name in named.items() if (run_dir / name).is_file()}
    for number, trace in enumerate(find_traces(run_dir), start=1):
        found["trace" if number == 1 else f"trace-{number}"] = trace.name
    return found


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _one_line(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, Mapping):
        kind, message = value.get("type"), value.get("message")
        value = f"{kind}: {message}" if kind else message
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    return lines[-1] if lines else None


def _has_traceback(lines: tuple[str, ...]) -> bool:
    return any(line.startswith("Traceback (most recent call last)") for line in lines)


def _last_error_line(lines: tuple[str, ...]) -> str | None:
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
