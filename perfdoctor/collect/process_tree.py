"""Probes in the Python processes a run starts: spawn workers, Hogwild trainers, torchrun ranks.

`perfdoctor/collect/inject/sitecustomize.py` calls `activate(torch)` in every Python process
of the run (PERFDOCTOR_TREE set to the child run directory) right after that process imports
torch, except the perfdoctor child itself and launcher agents. Activation is lazy: it installs
the same probes and appliers the bootstrap installs, seeded the same way, but the process
writes nothing until its first training step. A process that never steps (a DataLoader worker,
a checkpoint writer, the torchrun agent) leaves no trace in the run directory.

A process that trains keeps its own record in `<run>/procs/<host>-<pid>/` (observations.json,
steps.jsonl, progress.jsonl, its profiler trace) and follows the same plan as the bootstrap:
warm-up, timed and profiled steps, then a clean stop. Where the bootstrap unwinds the script
with PlanComplete, a sub-process cannot (multiprocessing and torch.multiprocessing.spawn
would report the exception as a crash), so it writes its record and leaves with exit code 0
(os._exit: torch 2.13's gloo teardown at interpreter exit aborts now and then while a DDP
model is alive, bootstrap.py's doc). SIGTERM (a timeout, Ctrl-C, a failing rank) writes the
record and leaves with 143. The parent settles these records into the run directory when the
run ends (collect/tree_settle.py).

Fork children (multiprocessing's fork start method, the Linux default) inherit the probes of
the process that forked, the perfdoctor child included: `follow_forks` re-points them in the
child to a record of its own (`_ProcessProbes.adopt`), so a forked Hogwild trainer keeps its
own steps and a forked DataLoader worker, which never steps, writes nothing. Every entry
point checks the pid.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfdoctor import rundir
from perfdoctor.model import RunSpec

log = logging.getLogger(__name__)

TREE_ENV = "PERFDOCTOR_TREE"  # the child run directory; set by the parent (tree_settle.py)
EXIT_SIGTERM = 128 + signal.SIGTERM
_GATHER_KEY = "perfdoctor/record"
GATHER_S = 60.0  # how long rank 0 waits for the other nodes' records at the plan's end

_active: _ProcessProbes | None = None


def process_key() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def process_kind() -> str:
    """How this process was started, from what is visible at start-up (mechanics §1.2)."""
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    if "--multiprocessing-fork" in argv or "multiprocessing.spawn" in argv:
        return "multiprocessing-spawn"
    if "multiprocessing.forkserver" in argv:
        return "multiprocessing-forkserver"
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    return "subprocess"


def follow_forks(runtime: Any, probes: Any, applied: Any, torch: Any) -> None:
    """A forked child (multiprocessing's fork start method) inherits this process's probes;
    after the fork it keeps them as its own record instead (`_ProcessProbes.adopt`)."""
    tree = os.environ.get(TREE_ENV)
    if not tree or not hasattr(os, "register_at_fork"):
        return
    base = runtime.spec
    watch_process_errors()

    def after_in_child() -> None:
        global _active
        try:
            _active = _ProcessProbes(base, Path(tree), torch)
            _active.adopt(runtime, probes, applied)
        except Exception:
            log.debug("forked child not followed", exc_info=True)

    os.register_at_fork(after_in_child=after_in_child)


def activate(torch: Any) -> None:
    """Install lazy probes in this process (called once torch is imported)."""
    global _active
    if _active is not None and _active.pid == os.getpid():
        return
    tree = os.environ.get(TREE_ENV)
    if not tree:
        return
    spec_path = Path(tree) / rundir.SPEC_FILE
    try:
        base = rundir.spec_from_dict(rundir.read_json(spec_path))
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.debug("no spec at %s: %s", spec_path, err)
        return
    _active = _ProcessProbes(base, Path(tree), torch)
    _active.install()


class _ProcessProbes:
    def __init__(self, base: RunSpec, tree: Path, torch: Any) -> None:
        self.pid = os.getpid()
        self.torch = torch
        self.kind = process_kind()
        self.run_dir = rundir.proc_dir(tree, process_key())
        self.spec = replace(base, run_dir=str(self.run_dir))
        self.trained = False
        self.done = False
        self.rank_seen: dict[str, Any] = {}
        self.error: str | None = None
        self.error_at: float | None = None
        self.probes: Any = None
        self.runtime: Any = None
        self.applied: Any = None

    def install(self) -> None:
        from perfdoctor.analyze.frames import UserCode
        from perfdoctor.collect import bootstrap
        from perfdoctor.collect.probes import Probes
        from perfdoctor.collect.runtime import Runtime

        spec, torch = self.spec, self.torch
        self.runtime = runtime = Runtime(spec)
        if spec.seed is not None:
            runtime.observations["seeded"] = bootstrap.seed_everything(spec.seed, torch)
        runtime.observations["seed"] = spec.seed
        roots = UserCode.for_target(bootstrap._initial_user_root(spec), spec.cwd)
        script = sys.argv[0] if sys.argv else ""
        if script.endswith(".py"):  # a torchrun rank or a `python train.py` the script started
            roots.add_root(os.path.dirname(os.path.abspath(script)))
        self.applied = bootstrap._install_appliers(spec, runtime)
        self.probes = Probes(runtime, torch, roots, bootstrap._time_origin())
        _guard_plan_complete(self.probes.tracker, self)
        runtime.on_step_start(self._on_step_start)
        self.probes.install()
        follow_forks(runtime, self.probes, self.applied, torch)

    def adopt(self, runtime: Any, probes: Any, applied: Any) -> None:
        """Take over probes inherited through fork(): new files, this process's plan end."""
        from perfdoctor.collect import bootstrap
        from perfdoctor.collect.memory_history import MemoryHistory
        from perfdoctor.collect.profiler_window import ProfilerWindow
        from perfdoctor.collect.step_log import StepLog

        self.runtime, self.probes, self.applied = runtime, probes, applied
        self.kind = "multiprocessing-fork"
        runtime.spec = self.spec
        probes.step_log = StepLog(self.run_dir, bootstrap._time_origin())
        if probes.profiler is not None:
            plan = probes.plan
            probes.profiler = ProfilerWindow(
                self.run_dir, first_step=plan.profiled_start, steps=plan.profiled
            )
        # CUDA cannot be used after fork anyway: no memory history of the parent's.
        probes.memory = MemoryHistory(self.run_dir, requested=False, max_entries=1)
        _guard_plan_complete(probes.tracker, self)
        runtime.on_step_start(self._on_step_start)
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGTERM, self._on_sigterm)  # not the parent's handler

    # ------------------------------------------------------------------ the first step

    def _on_step_start(self, index: int) -> None:
        if os.getpid() != self.pid:
            return
        if not self.trained:
            self.trained = True
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._arm_exit_paths()
        if index == 0 or index == self.probes.plan.warmup:
            self._note_rank()

    def _arm_exit_paths(self) -> None:
        atexit.register(self.finish, None)
        with contextlib.suppress(ImportError):
            from multiprocessing import util

            # fork children leave through os._exit after running these, never atexit
            util.Finalize(None, self.finish, args=(None,), exitpriority=100)
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                    signal.signal(signal.SIGTERM, self._on_sigterm)
        previous_hook = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            self.note_error(exc)
            previous_hook(kind, exc, tb)

        sys.excepthook = excepthook

    def note_error(self, exc: BaseException) -> None:
        if self.error is not None or os.getpid() != self.pid:
            return
        lines = str(exc).strip().splitlines()
        self.error = f"{type(exc).__name__}: {lines[-1] if lines else ''}"
        self.error_at = time.time()  # the first rank to fail names the run's error

    def _note_rank(self) -> None:
        from perfdoctor.collect import observe

        dist = observe.dist_info(self.torch)
        if dist.get("initialized"):
            self.rank_seen = {"rank": dist.get("rank"), "world_size": dist.get("world_size")}

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.pid or not self.trained:
            # Not ours to record (a forked DataLoader worker): die of it, as it would have.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        from perfdoctor.collect import parent_death

        if parent_death.orphaned():  # perfdoctor's direct child, and perfdoctor is gone
            parent_death.stop_tree()
        if self.done:
            return  # already writing the record (atexit after a crash); SIGKILL bounds us
        self.finish(EXIT_SIGTERM, signal_name="SIGTERM")
        parent_death.finish_stopping()
        _leave(EXIT_SIGTERM)

    # ------------------------------------------------------------------ the end

    def plan_complete(self) -> None:
        """The plan is done: write the record and leave, as a script that returned would."""
        self.finish(0, stopped=True)
        _leave(0)

    def finish(
        self, exit_code: int | None, *, stopped: bool = False, signal_name: str | None = None
    ) -> None:
        """Write this process's record once; nothing when it never trained."""
        if os.getpid() != self.pid or self.done or not self.trained:
            return
        self.done = True
        from perfdoctor.collect import bootstrap

        outcome = bootstrap.Outcome(exit_code=exit_code or 0, stopped=stopped)
        outcome.ended_normally = exit_code is None
        if signal_name:
            outcome.observations["signal"] = signal_name
        if self.error:
            outcome.observations["error"] = self.error
            outcome.observations["error_at_unix"] = self.error_at
            outcome.exit_code = 1
        self._note_rank()
        outcome.observations["process"] = self.describe(1 if self.error else exit_code)
        try:
            bootstrap._finalize(
                self.spec, self.runtime, self.probes, self.applied, outcome, self.torch
            )
        except Exception:
            log.exception("process record not written")
        if stopped:  # every rank reached the plan's end: the store is there for all of them
            try:
                _gather_on_node_0(self)
            except Exception as err:
                log.warning("records of the other nodes not gathered: %r", err)

    def describe(self, exit_code: int | None) -> dict[str, Any]:
        env = os.environ
        rank = self.rank_seen.get("rank")
        if rank is None and env.get("RANK", "").isdigit():
            rank = int(env["RANK"])
        world = self.rank_seen.get("world_size")
        if world is None and env.get("WORLD_SIZE", "").isdigit():
            world = int(env["WORLD_SIZE"])
        return {
            "pid": self.pid,
            "ppid": os.getppid(),
            "host": socket.gethostname(),
            "kind": self.kind,
            "rank": rank,
            "world_size": world,
            "local_rank": int(env["LOCAL_RANK"]) if env.get("LOCAL_RANK", "").isdigit() else None,
            "node_rank": int(env["GROUP_RANK"]) if env.get("GROUP_RANK", "").isdigit() else None,
            "exit_code": exit_code,
            "shared_model": self._shared_model(),
        }

    def _shared_model(self) -> bool | None:
        """Whether the trained model's parameters live in shared memory (Hogwild's
        `model.share_memory()`); None when no root model was found."""
        roots = list(getattr(getattr(self.probes, "roots", None), "roots", None) or ())
        if not roots:
            return None
        try:
            return any(p.is_shared() for root in roots for p in root.parameters())
        except Exception:
            return None


def watch_process_errors() -> None:
    """A multiprocessing.Process whose target raises never reaches sys.excepthook:
    `BaseProcess._bootstrap` prints the traceback and exits 1, after running the finalizers
    that write this process's record. So each process's `run` (a subclass's own included)
    notes the error on its way out, before those finalizers."""
    from multiprocessing import process

    # Any: _bootstrap is private to multiprocessing, absent from its stubs.
    base: Any = process.BaseProcess
    original = base._bootstrap
    if getattr(original, "__perfdoctor__", False):
        return

    def bootstrap(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = self.run

        def noted_run() -> Any:
            try:
                return run()
            except Exception as exc:  # SystemExit and Ctrl-C are no error of the script's
                if _active is not None:
                    _active.note_error(exc)
                raise

        self.run = noted_run
        return original(self, *args, **kwargs)

    bootstrap.__perfdoctor__ = True  # type: ignore[attr-defined]
    base._bootstrap = bootstrap


def _gather_on_node_0(owner: _ProcessProbes) -> None:
    """Several nodes: ranks of nodes >= 1 hand their record to rank 0 through torch.distributed's
    own store (the job's rendezvous store, no server of ours); rank 0 unpacks them into its
    run's procs/, so node 0's report has every rank. Nodes >= 1 keep their own copy too."""
    env = os.environ
    if int(env.get("GROUP_WORLD_SIZE", "1") or 1) <= 1:
        return
    dist = owner.torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return
    from datetime import timedelta

    store = dist.distributed_c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(env.get("LOCAL_WORLD_SIZE", "1") or 1)
    if int(env.get("GROUP_RANK", "0") or 0) != 0:
        store.set(f"{_GATHER_KEY}/{rank}", _pack(owner.run_dir))
        return
    if rank != 0:
        return
    remote = list(range(local, world))  # torchrun numbers ranks node by node
    keys = [f"{_GATHER_KEY}/{r}" for r in remote]
    with contextlib.suppress(Exception):  # a node that never got there: keep what came
        store.wait(keys, timedelta(seconds=GATHER_S))
    for r, key in zip(remote, keys, strict=True):
        if store.check([key]):
            _unpack(store.get(key), owner.run_dir.parent / f"node-rank-{r}")


def _pack(directory: Path) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.iterdir()):
            if path.is_file():
                tar.add(path, arcname=path.name)
    return buffer.getvalue()


def _unpack(data: bytes, directory: Path) -> None:
    import io
    import tarfile

    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/" not in m.name]
        tar.extractall(directory, members=members, filter="data")


def _guard_plan_complete(tracker: Any, owner: _ProcessProbes) -> None:
    """Every tracker entry point the hooks call: PlanComplete ends the process cleanly."""
    from perfdoctor.collect.probes_steps import PlanComplete

    for name in dir(type(tracker)):
        if name.startswith("_"):
            continue
        method = getattr(tracker, name, None)
        if not callable(method) or isinstance(method, type):
            continue

        def guarded(*args: Any, __method: Any = method, **kwargs: Any) -> Any:
            try:
                return __method(*args, **kwargs)
            except PlanComplete:
                if os.getpid() != owner.pid:
                    raise
                owner.plan_complete()
                raise  # not reached: plan_complete leaves the process

        setattr(tracker, name, guarded)


def _leave(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
