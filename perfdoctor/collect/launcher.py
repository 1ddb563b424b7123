"""Parent side of one child run: spawn, watch, bound, and always leave a manifest behind.

`launch(spec)` writes spec.json, runs the child bootstrap (`perfdoctor.collect.bootstrap`) in its
own process group (so a timeout or Ctrl-C can end DataLoader workers with it), tees the
script's stdout/stderr to the terminal and to stdout.log / stderr.log, tails progress.jsonl
for the live display, samples devices in a thread, and writes manifest.json whatever
happened: success, crash, sys.exit(n), timeout, Ctrl-C, or a child that never started.

This module composes the parts, each in its own module: output_capture.py (the tees),
progress_watch.py (progress.jsonl), supervision.py (timeout, stopping the process tree)
and manifest.py (manifest.json).

The parent never imports torch or the user's script; the run directory contract is
docs/run-directory.md.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from perfdoctor.collect import parent_death, subreaper, torchrun, tree_settle
from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.manifest import write_manifest
from perfdoctor.collect.nvml import NvmlSampler
from perfdoctor.collect.output_capture import OutputTee
from perfdoctor.collect.progress_watch import Progress, ProgressWatch
from perfdoctor.collect.sampling import DEFAULT_PERIOD_S, SamplingThread
from perfdoctor.collect.supervision import (
    GRACE_S,
    LEFTOVER_GRACE_S,
    ChildOutcome,
    ProcessTree,
    end_leftovers,
    supervise,
    terminate_group,
    terminate_then_kill,
)
from perfdoctor.errors import (
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_UNWRITABLE,
    OutputUnwritable,
    interrupt_exit_code,
    interrupt_name,
)
from perfdoctor.model import RunManifest, RunSpec
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
    write_json,
)

logger = logging.getLogger(__name__)

BOOTSTRAP_MODULE = "perfdoctor.collect.bootstrap"
# bootstrap.OUTPUT_ERROR_PREFIX (not imported: the bootstrap imports torch's world)
OUTPUT_ERROR_PREFIX = "perfdoctor: output not written: "
# `python -c` rather than `-m`: no runpy frames above the script's (bootstrap.py's doc says why).
ENTRY_CODE = f"import sys; from {BOOTSTRAP_MODULE} import main; sys.exit(main(sys.argv[1:]))"
# The child measures its step times on the same origin as the parent's samples.
T0_ENV = "PERFDOCTOR_T0_UNIX"

__all__ = ["ENTRY_CODE", "T0_ENV", "Progress", "launch"]


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
    if not os.path.isabs(spec.run_dir):
        # The child resolves paths against its own cwd, which the script may change
        # (os.chdir): everything it is handed is absolute, against perfdoctor's cwd.
        spec = replace(spec, run_dir=os.path.abspath(spec.run_dir))
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_artifacts(run_dir)
    spec_path = run_dir / SPEC_FILE
    write_json(spec_path, spec)
    watch = ProgressWatch(spec, run_dir, on_progress)
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
    # Orphans of the run (a double-forked daemon) come to perfdoctor, not to init.
    subreaper.become_subreaper()
    started_at = time.time()
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
        failed = ChildOutcome(spawn_error=f"{where}: {err.strerror or err}")
        return write_manifest(spec, run_dir, failed, watch.rows)
    proc.perfdoctor_run_dir = run_dir  # type: ignore[attr-defined]  # supervision.terminate_group
    tees = [
        OutputTee(proc.stdout, run_dir / STDOUT_FILE, sys.stdout if echo_output else None),
        OutputTee(proc.stderr, run_dir / STDERR_FILE, sys.stderr if echo_output else None),
    ]
    tree = ProcessTree(proc.pid)
    sampler = SamplingThread(
        [
            NvmlSampler(visible_devices=env.get("CUDA_VISIBLE_DEVICES")),
            CpuSampler(proc.pid, on_lookup=tree.saw),
        ],
        run_dir / SAMPLES_FILE,
        origin=watch.t0,
        origin_unix=watch.t0_unix,
        period_s=DEFAULT_PERIOD_S,
    )
    outcome = ChildOutcome()
    pending: BaseException | None = None
    try:
        for tee in tees:
            tee.start()
        sampler.start()
        outcome = supervise(proc, watch, timeout_s, tree)
    except BaseException as err:  # KeyboardInterrupt, or a failing on_progress callback
        pending = err
        outcome = ChildOutcome(interrupted=True)
        if isinstance(err, KeyboardInterrupt):
            outcome.interrupt_code = interrupt_exit_code(err)
            if outcome.interrupt_code != EXIT_INTERRUPTED:
                outcome.internal_error = f"perfdoctor was stopped by {interrupt_name(err)}"
        else:
            outcome.internal_error = f"perfdoctor: {type(err).__name__}: {err}"
        tree.refresh()
        outcome.exit_code = terminate_group(proc, GRACE_S)
    finally:
        outcome.exit_code = proc.wait() if outcome.exit_code is None else outcome.exit_code
        outcome.wall_s = time.monotonic() - watch.t0
        left_in_group = end_leftovers(proc.pid)
        if tree.stop_survivors() or left_in_group:
            outcome.warnings.append("processes the script left behind were terminated")
        if tree_settle.end_tree(run_dir, LEFTOVER_GRACE_S):
            outcome.warnings.append("processes of the run still running were terminated")
        adopted = subreaper.adopted_since(started_at, exclude={proc.pid})
        if adopted:
            terminate_then_kill(adopted, LEFTOVER_GRACE_S)
            outcome.warnings.append(
                f"{len(adopted)} process(es) the script detached (a daemon) were terminated"
            )
        subreaper.stop_being_subreaper()
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
        manifest = write_manifest(spec, run_dir, outcome, watch.rows)
    if pending is not None:
        raise pending
    _raise_if_output_unwritable(outcome)
    return manifest


def _raise_if_output_unwritable(outcome: ChildOutcome) -> None:
    """The child could not write the run's artifacts (bootstrap.py: no space left, a
    read-only file system): perfdoctor's own failure, never the script's exit code 73."""
    if outcome.exit_code != EXIT_OUTPUT_UNWRITABLE:
        return
    for line in reversed(outcome.stderr_tail):
        if line.startswith(OUTPUT_ERROR_PREFIX):
            raise OutputUnwritable(
                line.removeprefix(OUTPUT_ERROR_PREFIX).strip(),
                hint="free some space, or give --out a directory you can write",
            )


# --------------------------------------------------------------------------- child environment


def _child_env(spec: RunSpec, t0_unix: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in spec.env.items()})
    env["PYTHONUNBUFFERED"] = "1"  # the script's prints reach the terminal as they happen
    env[T0_ENV] = repr(t0_unix)
    if threading.current_thread() is threading.main_thread():
        # The child stops its tree when perfdoctor dies (parent_death.py). Only from the main
        # thread: a parent-death signal follows the thread that started the child, and any
        # other thread of perfdoctor's may end before the run does.
        env[parent_death.PARENT_ENV] = str(os.getpid())
    else:
        env.pop(parent_death.PARENT_ENV, None)
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
