"""Child entry point: `python -c "<launcher.ENTRY_CODE>" <run_dir>/spec.json` as the launcher
starts it, or `python -m perfdoctor.collect.bootstrap <run_dir>/spec.json` (the same, with
runpy's frames above it).

Reads the RunSpec, seeds, installs the appliers and probes, runs the user's target as plain
`python` would, and always leaves observations.json and steps.jsonl behind.

Exit code: the script's own. 0 when it finished or perfdoctor stopped it after the plan,
n for `sys.exit(n)`, 1 for an uncaught exception (its traceback printed as Python would),
130 for Ctrl-C, 143 for SIGTERM (the parent's timeout), 66 when the target is not found,
65 when it does not compile, 2 for a bad command line. Everything runs from the imported
module `perfdoctor.collect.bootstrap`, never from `__main__`: while the script runs,
`__main__` is the script (mechanics §1.1).

The script's code is exec'd by `main` itself, which `ENTRY_CODE` calls from the top level,
so only two frames (`<string>`, `main`) are above the script's own top-level frame. Under
`torch.autograd.set_detect_anomaly(True)` every op records the whole Python stack: every
frame above the script's costs time on every op (~20 us per frame and step on a small MLP).

Python processes the script starts (torch.multiprocessing.spawn workers, Hogwild trainers,
torchrun ranks under `--nproc-per-node N`) are instrumented by perfdoctor.collect.process_tree,
which reuses this module's seeding, appliers and finalisation. They leave with os._exit once
their artifacts are written: torch 2.13's gloo teardown at interpreter exit aborts now and then
(SIGABRT, "terminate called without an active exception") while a DDP model is alive, which a
rank stopped mid-training always has.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import random
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import perfdoctor
from perfdoctor import run_schema, rundir
from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect import parent_death, process_tree, script_runner, session_leader
from perfdoctor.collect.probes_steps import PlanComplete
from perfdoctor.collect.runtime import Runtime
from perfdoctor.collect.step_log import ArtifactUnwritable
from perfdoctor.errors import (
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_UNWRITABLE,
    EXIT_TARGET_NOT_FOUND,
    EXIT_USAGE,
    one_line_message,
)
from perfdoctor.model import RunSpec

log = logging.getLogger(__name__)

EXIT_SIGTERM = 128 + signal.SIGTERM
# The child's one line when it cannot write the run's artifacts (launcher.py reads it).
OUTPUT_ERROR_PREFIX = "perfdoctor: output not written: "
# Unix time of the parent's t=0 (perfdoctor.collect.launcher.T0_ENV; not imported, to keep
# the child's imports to what it uses).
T0_ENV = "PERFDOCTOR_T0_UNIX"


@dataclass
class Outcome:
    """How the script ended, and what the child exits with."""

    exit_code: int = 0
    ended_normally: bool = False
    stopped: bool = False
    reraise: BaseException | None = None  # a SystemExit to re-raise after finalising
    observations: dict[str, Any] = field(default_factory=dict)


class _SigtermState:
    """SIGTERM -> SystemExit in the main thread, so `finally` blocks flush the artifacts."""

    owner_pid = -1
    received = False
    finalizing = False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _SigtermState.owner_pid:
        # A forked DataLoader worker inherited this handler: die as it would have.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if parent_death.orphaned():
        # perfdoctor is gone (SIGKILL, the OOM killer): stop the tree as it would have.
        parent_death.stop_tree()
    if _SigtermState.finalizing:
        return  # already flushing; the parent's SIGKILL bounds us
    _SigtermState.received = True
    raise SystemExit(EXIT_SIGTERM)


def seed_everything(seed: int, torch: Any) -> list[str]:
    """Same seeds in every variant, so loss trajectories are comparable."""
    random.seed(seed)
    torch.manual_seed(seed)  # CUDA generators are seeded lazily: no CUDA init here
    seeded = ["random", "torch"]
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
        seeded.append("numpy")
    except ImportError:
        pass
    return seeded


def _time_origin() -> float:
    """perf_counter value of the parent's t=0, so progress `t` matches samples.jsonl `t`."""
    now_perf, now_unix = time.perf_counter(), time.time()
    try:
        t0_unix = float(os.environ[T0_ENV])
    except (KeyError, ValueError):
        return now_perf
    return now_perf - (now_unix - t0_unix)


def _initial_user_root(spec: RunSpec) -> str:
    if spec.target.kind == "script":
        path = os.path.abspath(os.path.join(spec.cwd, spec.target.name))
        return path if os.path.isdir(path) else os.path.dirname(path)
    return os.path.abspath(spec.cwd)


def main(argv: list[str]) -> int:
    parent_death.arm()  # armed already by sitecustomize, unless started without `site`
    session_leader.install()  # os.setpgrp() works as under plain python (session_leader.py)
    _log_to_stderr()
    if len(argv) != 1:
        sys.stderr.write("usage: python -m perfdoctor.collect.bootstrap <run_dir>/spec.json\n")
        return EXIT_USAGE
    spec = rundir.spec_from_dict(rundir.read_json(Path(argv[0])))
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    origin = _time_origin()
    _SigtermState.owner_pid = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)

    import torch

    runtime = Runtime(spec)
    if spec.seed is not None:
        runtime.observations["seeded"] = seed_everything(spec.seed, torch)
    runtime.observations["seed"] = spec.seed
    user_code = UserCode.for_target(_initial_user_root(spec), spec.cwd)
    applied = _install_appliers(spec, runtime)

    from perfdoctor.collect.probes import Probes

    probes = Probes(runtime, torch, user_code, origin)
    probes.install()
    compile_watch = _watch_compile(probes)
    probes.attach_ab(applied)
    process_tree.follow_forks(runtime, probes, applied, torch)  # fork children: their own record

    outcome = Outcome()
    resolved: script_runner.ResolvedTarget | None = None
    try:
        resolved = script_runner.resolve(spec.target, spec.cwd)
        user_code.add_root(resolved.root)
        script = script_runner.prepare(resolved)
        if script is None:
            script_runner.run_path(resolved)
        else:
            with script as namespace:
                # Here, not in a helper: each frame above the script's costs (module doc).
                exec(script.code, namespace)
        outcome.ended_normally = True
    except PlanComplete as exc:
        outcome.stopped = True
        outcome.observations["stopped_at"] = _stop_point(probes, user_code, exc)
    except script_runner.LaunchError as exc:
        _report_launch_error(exc, outcome)
    except ArtifactUnwritable as exc:
        # Said in one line; the parent reads it (launcher.py) and ends with this code.
        sys.stderr.write(f"{OUTPUT_ERROR_PREFIX}{exc}\n")
        outcome.exit_code = EXIT_OUTPUT_UNWRITABLE
        outcome.observations["output_error"] = str(exc)
    except SystemExit as exc:
        outcome.exit_code = _exit_status(exc.code)
        outcome.reraise = exc
        if _SigtermState.received:
            outcome.observations["signal"] = "SIGTERM"
        else:
            outcome.observations["script_exit_code"] = outcome.exit_code
    except KeyboardInterrupt as exc:
        _print_script_traceback(exc, resolved)
        outcome.exit_code = EXIT_INTERRUPTED
        outcome.observations["interrupted"] = True
    except BaseException as exc:
        _report_crash(exc, resolved, user_code, outcome, probes, torch)
    finally:
        _SigtermState.finalizing = True
        _finalize(spec, runtime, probes, applied, outcome, torch)
        _write_compile_log(compile_watch, run_dir)
        if parent_death.orphaned():
            # perfdoctor is gone: nothing of the run may outlive it, and nobody waits for
            # this process's exit status (parent_death.py).
            parent_death.stop_tree()
            parent_death.finish_stopping()
            parent_death.leave_now(outcome.exit_code)
    if outcome.stopped:
        _leave_despite_threads(outcome.exit_code)
    if outcome.reraise is not None:
        # SystemExit(n) keeps Python's own handling: a string code is printed, exits 1.
        raise outcome.reraise
    return outcome.exit_code


# After perfdoctor stopped the script at the plan's end, its non-daemon threads (a reader, a
# heartbeat that loops forever) get this long to end; Python would wait for them forever
# at exit, and the session never finished.
THREAD_GRACE_S = 2.0


def _leave_despite_threads(code: int) -> None:
    """Exit now, artifacts written, if threads of the script would hold the process open."""
    deadline = time.monotonic() + THREAD_GRACE_S
    for thread in _holding_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    still = _holding_threads()
    if not still:
        return
    log.warning(
        "the script's thread(s) %s still ran after the planned steps: the run ends without "
        "waiting for them",
        ", ".join(repr(t.name) for t in still[:5]),
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _holding_threads() -> list[threading.Thread]:
    main_thread = threading.main_thread()
    return [
        t for t in threading.enumerate() if t is not main_thread and not t.daemon and t.is_alive()
    ]


def _watch_compile(probes: Any) -> Any:
    try:
        from perfdoctor.collect.compile_watch import CompileWatch

        watch = CompileWatch(lambda: probes.tracker.steps_closed)
        return watch if watch.install() else None
    except Exception:
        log.debug("compile watch not installed", exc_info=True)
        return None


def _write_compile_log(watch: Any, run_dir: Path) -> None:
    if watch is None:
        return
    try:
        watch.uninstall()
        watch.write(run_dir)
    except Exception:
        log.warning("compile.json not written", exc_info=True)


def _stop_point(probes: Any, user_code: UserCode, exc: PlanComplete) -> dict[str, Any]:
    """Where perfdoctor stopped the script: the step that would have begun next, and the
    user's line the stop came through (their loop, or the `trainer.fit(...)` call)."""
    point: dict[str, Any] = {"step": probes.plan_finished_at}
    location = user_code.innermost_in_traceback(exc.__traceback__)
    if location is not None:
        point["location"] = location
    framework = _training_framework(exc.__traceback__)
    if framework is not None:
        point["framework"] = framework
    return point


# The training loop's owner, by the files the stop came through: what "its end of training"
# holds differs (Lightning's on_train_end and final checkpoint, the HF Trainer's save).
_FRAMEWORK_FILES = (
    ("lightning", ("/pytorch_lightning/trainer/", "/lightning/pytorch/trainer/")),
    ("transformers", ("/transformers/trainer.py",)),
)


def _training_framework(tb: Any) -> str | None:
    files: list[str] = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    for name, markers in _FRAMEWORK_FILES:
        if any(marker in f for f in files for marker in markers):
            return name
    return None


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message"): Python prints it and exits 1


def _install_appliers(spec: RunSpec, runtime: Runtime) -> Any:
    if not spec.optimizations:
        return None
    try:
        from perfdoctor.collect import appliers

        return appliers.install(spec.optimizations, runtime)
    except Exception as exc:
        log.debug("appliers not installed", exc_info=True)
        detail = f"appliers unavailable: {type(exc).__name__}: {exc}"
        runtime.warn(detail)
        runtime.observations["applied"] = [
            {"id": opt_id, "applied": False, "verified": False, "detail": detail}
            for opt_id in spec.optimizations
        ]
        return None


def _report_launch_error(exc: script_runner.LaunchError, outcome: Outcome) -> None:
    cause = exc.__cause__
    if isinstance(cause, SyntaxError):
        traceback.print_exception(type(cause), cause, None)  # as Python shows it
    elif exc.exit_code != EXIT_TARGET_NOT_FOUND:
        # (A target that is not found is said once, by the parent's one-line error.)
        sys.stderr.write(f"{sys.executable}: {exc}\n")
    outcome.exit_code = exc.exit_code
    outcome.observations["launch_error"] = str(exc)


def _report_crash(
    exc: BaseException,
    resolved: script_runner.ResolvedTarget | None,
    user_code: UserCode,
    outcome: Outcome,
    probes: Any,
    torch: Any,
) -> None:
    _print_script_traceback(exc, resolved)
    outcome.exit_code = 1
    outcome.observations["error"] = f"{type(exc).__name__}: {one_line_message(str(exc))}"
    outcome.observations["error_type"] = type(exc).__name__
    location = user_code.innermost_in_traceback(exc.__traceback__)
    if location is not None:
        outcome.observations["error_location"] = location
    oom_cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom_cls is not None and isinstance(exc, oom_cls):
        outcome.observations["cuda_oom"] = True
        probes.memory.dump_on_oom()


def _print_script_traceback(
    exc: BaseException, resolved: script_runner.ResolvedTarget | None
) -> None:
    """The script's traceback as `python script.py` prints it: without perfdoctor's frames
    above the script's first one."""
    tb = exc.__traceback__
    if resolved is not None:
        target = os.path.normcase(resolved.file)
        probe = tb
        while probe is not None:
            if os.path.normcase(probe.tb_frame.f_code.co_filename) == target:
                tb = probe
                break
            probe = probe.tb_next
    try:
        traceback.print_exception(type(exc), exc, tb)
        sys.stderr.flush()
    except Exception:
        log.debug("traceback not printed", exc_info=True)


def _finalize(
    spec: RunSpec,
    runtime: Runtime,
    probes: Any,
    applied: Any,
    outcome: Outcome,
    torch: Any,
) -> None:
    """Each part guarded: one failure must not cost the other artifacts."""
    for part in (
        lambda: probes.finish(script_ended_normally=outcome.ended_normally),
        runtime.publish_finalize,
        probes.shutdown_workers,
    ):
        try:
            part()
        except Exception:
            log.debug("finalising step failed", exc_info=True)
            runtime.warn(f"perfdoctor finalisation step failed: {sys.exc_info()[1]!r}")
    observations: dict[str, Any] = {}
    try:
        observations = probes.observations()
    except Exception:
        log.debug("observations incomplete", exc_info=True)
        runtime.warn(f"perfdoctor observations incomplete: {sys.exc_info()[1]!r}")
    if applied is not None:
        try:
            observations["applied"] = applied.results()
        except Exception:
            runtime.warn(f"applier results unavailable: {sys.exc_info()[1]!r}")
    for key, value in runtime.observations.items():
        if key != "warnings":
            observations[key] = value
    observations.update(outcome.observations)
    observations["stopped_by_perfdoctor"] = bool(
        outcome.stopped or observations.get("stopped_by_perfdoctor")
    )
    observations["exit_code"] = outcome.exit_code
    observations["versions"] = {
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "perfdoctor": perfdoctor.__version__,
    }
    observations["warnings"] = list(runtime.observations.get("warnings", []))
    observations = _json_safe(observations)
    try:
        # Checked against the schema the analysis decodes it with (unknown keys pass): a
        # mismatch is a bug here, said in the child's stderr; the file is still written whole.
        run_schema.observations(observations)
    except run_schema.SchemaMismatch as err:
        log.warning("observations.json does not match its schema: %s", err)
    try:
        rundir.write_json(Path(spec.run_dir) / rundir.OBSERVATIONS_FILE, observations)
    except OSError as err:
        # A full disk or a read-only file system: one line, the parent ends in 73 and says
        # why; a traceback of perfdoctor's own here would read as the script's.
        log.warning("observations.json not written: %s", err.strerror or err)
    except Exception:
        log.exception("observations.json not written")


def _json_safe(value: Any) -> Any:
    """Plain JSON values only; anything else (a dtype, a device) becomes its str()."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def _log_to_stderr() -> None:
    # Only perfdoctor's own logger: configuring the root logger would turn the script's
    # own logging.basicConfig() into a no-op.
    ours = logging.getLogger("perfdoctor")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("perfdoctor: %(message)s"))
    ours.addHandler(handler)
    ours.propagate = False
    ours.setLevel(logging.DEBUG if os.environ.get("PERFDOCTOR_DEBUG") else logging.WARNING)


def _entry() -> None:
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    # Re-enter through the importable module: hooks and the exceptions they raise must not
    # live in `__main__`, which becomes the user's script while it runs.
    from perfdoctor.collect.bootstrap import _entry as _imported_entry

    _imported_entry()
