"""Parent side of process-tree instrumentation: inject, stop every process, settle records.

- `tree_env(run_dir)`: what the child's environment gets so that every Python process it
  starts runs perfdoctor/collect/inject/sitecustomize.py (PYTHONPATH) and knows its run
  (PERFDOCTOR_TREE = the child run directory).
- `signal_tree` / `end_tree`: the processes of a run are found by that variable in their
  environment, not by process group or parentage: torchrun starts its ranks in sessions of
  their own, and a rank whose launcher died is re-parented. So a timeout, Ctrl-C or a failed
  rank reaches every one of them, and none is left running after the run.
- `settle(run_dir)`: once every process has ended, the records the training sub-processes
  wrote in `procs/<host>-<pid>/` become the run's. When the process perfdoctor started did
  not train itself (a torch.multiprocessing.spawn main, a Hogwild parent, a torchrun agent),
  the lead trainer (rank 0, else the first started) is promoted into the child directory,
  where the analysis reads a run, and the others go to `ranks/<k>/` (k = their rank under a
  process group, else their order), as the analysis reads further ranks. `processes.json`
  lists every process that trained, with pid, host, rank and where its record went.

Never imports torch (the parent side of collect/).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfdoctor import rundir
from perfdoctor.analyze.process_origin import origin, trains

log = logging.getLogger(__name__)

TREE_ENV = "PERFDOCTOR_TREE"  # perfdoctor.collect.process_tree.TREE_ENV (not imported: torch)
INJECT_DIR = Path(__file__).resolve().parent / "inject"
# Keys of the starting process's observations that describe how the run ended: they win over
# the promoted trainer's, whose process ended by perfdoctor's plan.
_ROOT_KEYS = (
    "error",
    "error_type",
    "error_location",
    "script_exit_code",
    "signal",
    "interrupted",
    "launch_error",
    "cuda_oom",
)
_MOVED_FILES = (
    rundir.OBSERVATIONS_FILE,
    rundir.STEPS_FILE,
    rundir.PROGRESS_FILE,
    rundir.MEMORY_SNAPSHOT_FILE,
)


def tree_env(run_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with the process-tree hook: PYTHONPATH first entry and PERFDOCTOR_TREE."""
    out = dict(env)
    parts = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR), *parts])
    out[TREE_ENV] = str(Path(run_dir).resolve())
    return out


# --------------------------------------------------------------------------- stopping


def tree_pids(run_dir: Path) -> list[int]:
    """Running processes of this run (by PERFDOCTOR_TREE in their environment), not ours."""
    try:
        import psutil
    except ImportError:
        return []
    key = str(Path(run_dir).resolve())
    me, uid = os.getpid(), os.getuid()
    found = []
    for proc in psutil.process_iter(["uids", "status"]):
        try:
            info = proc.info
            if proc.pid == me or info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if info["uids"] is None or info["uids"].real != uid:
                continue
            if proc.environ().get(TREE_ENV) == key:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def signal_tree(run_dir: Path, sig: signal.Signals) -> list[int]:
    pids = tree_pids(run_dir)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def end_tree(run_dir: Path, grace_s: float) -> list[int]:
    """SIGTERM every process of the run, `grace_s` to write records, SIGKILL the rest."""
    pids = signal_tree(run_dir, signal.SIGTERM)
    if not pids:
        return []
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and tree_pids(run_dir):
        time.sleep(0.05)
    signal_tree(run_dir, signal.SIGKILL)
    return pids


# --------------------------------------------------------------------------- records


@dataclass
class _Trainer:
    dir: Path
    observations: dict[str, Any]
    steps: int

    @property
    def process(self) -> dict[str, Any]:
        info = self.observations.get("process")
        return info if isinstance(info, dict) else {}

    @property
    def rank(self) -> int | None:
        rank = self.process.get("rank")
        return rank if isinstance(rank, int) else None

    def order(self) -> tuple[int, int, int]:
        rank = self.rank
        node = self.process.get("node_rank")
        pid = self.process.get("pid")
        return (
            rank if rank is not None else 1 << 30,
            node if isinstance(node, int) else 0,
            pid if isinstance(pid, int) else 0,
        )


def settle(run_dir: Path) -> list[str]:
    """Make the trainers' records the run's (module docstring); return warnings for the run."""
    run_dir = Path(run_dir)
    base = run_dir / rundir.PROCS_DIR
    trainers = _trainers(base)
    warnings: list[str] = []
    if not trainers:
        shutil.rmtree(base, ignore_errors=True)
        return warnings
    trainers.sort(key=_Trainer.order)
    root_steps = _count_lines(run_dir / rundir.STEPS_FILE)
    root_obs = _read_obs(run_dir) or {}
    entries: list[dict[str, Any]] = []
    # A starting process whose steps are only time windows (a Hogwild parent's test loop after
    # joining its trainers) does not lead when a started process trained: its "steps" would
    # describe evaluation.
    root_leads = bool(root_steps) and (
        trains(root_obs.get("step_detection"))
        or not any(trains(t.observations.get("step_detection")) for t in trainers)
    )
    if root_leads:
        entries.append({**_root_process(root_obs), "record": ".", "steps": root_steps})
        others = trainers
    else:
        trainers.sort(key=lambda t: not trains(t.observations.get("step_detection")))
        lead, others = trainers[0], trainers[1:]
        _promote(lead, run_dir, root_obs, root_steps)
        entries.append({**lead.process, "record": ".", "steps": lead.steps})
    ranks = [t.rank for t in others]
    by_rank = (
        not root_leads
        and trainers[0].rank == 0
        and all(r is not None for r in ranks)
        and len(set(ranks)) == len(ranks)
    )
    for number, trainer in enumerate(others, start=1):
        k = trainer.rank if by_rank and trainer.rank is not None else number
        target = rundir.rank_dir(run_dir, k)
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(trainer.dir), str(target))
        entries.append(
            {**trainer.process, "record": f"{rundir.RANKS_DIR}/{k}", "steps": trainer.steps}
        )
    shutil.rmtree(base, ignore_errors=True)
    failed = _first_failure(trainers)
    if failed is not None and not root_obs.get("error"):
        _note_failure(run_dir, failed, len(trainers) > 1)
    rundir.write_json(run_dir / rundir.PROCESSES_FILE, {"processes": entries})
    if len(entries) > 1 or not root_leads:
        warnings.append(_trained_note(entries, root_steps if not root_leads else 0))
    return warnings


def _trained_note(entries: list[dict[str, Any]], root_windows: int = 0) -> str:
    """'trained in 2 processes: rank 0 (pid 12, this record), rank 1 (pid 13, ranks/1)',
    then how they were started and, when the starting process ran steps that were no
    training (`root_windows` time windows), that it does not lead."""
    parts = []
    for entry in entries:
        rank, pid, record = entry.get("rank"), entry.get("pid"), entry.get("record")
        who = f"rank {rank}" if isinstance(rank, int) else "a process"
        where = "this record" if record == "." else str(record)
        host = entry.get("host")
        node = f" on {host}" if host and entry.get("node_rank") else ""
        pid_text = f"pid {pid}, " if pid else ""
        parts.append(f"{who} ({pid_text}{entry.get('steps')} steps{node}, {where})")
    count = len(entries)
    text = f"trained in {count} process{'es' if count != 1 else ''}: " + ", ".join(parts)
    how = origin(entries)
    if how:
        text += f"; {how}"
    if root_windows:
        # First: the terminal shortens long warnings, and this says whose figures these are.
        text = (
            f"the starting process did not train ({root_windows} time-window step(s) of "
            "forwards with no optimizer step or backward, e.g. a test loop): the lead record "
            f"is a trainer's; {text}"
        )
    return text


def _trainers(base: Path) -> list[_Trainer]:
    if not base.is_dir():
        return []
    found = []
    for path in sorted(base.iterdir()):
        if not path.is_dir():
            continue
        steps = _count_lines(path / rundir.STEPS_FILE)
        obs = _read_obs(path)
        if steps == 0 and not obs:
            continue
        found.append(_Trainer(path, obs or {}, steps))
    return found


def _promote(lead: _Trainer, run_dir: Path, root_obs: dict[str, Any], root_steps: int) -> None:
    """The lead's record becomes the child dir's; the starting process's ending is kept."""
    merged = dict(lead.observations)
    for key in _ROOT_KEYS:
        if key in root_obs:
            merged[key] = root_obs[key]
    warnings = [*root_obs.get("warnings", []), *merged.get("warnings", [])]
    merged["warnings"] = list(dict.fromkeys(str(w) for w in warnings))
    if root_obs:
        merged["starting_process"] = {
            "steps_seen": root_obs.get("steps_seen"),
            "exit_code": root_obs.get("exit_code"),
            "step_detection": root_obs.get("step_detection") if root_steps else None,
            # The starting process's own steps (a test loop's time windows): a cost of the
            # run outside training, for the loop account.
            "steps_wall_ms": _wall_ms(run_dir / rundir.STEPS_FILE) if root_steps else None,
        }
    for name in _MOVED_FILES:
        src = lead.dir / name
        dst = run_dir / name
        if name == rundir.OBSERVATIONS_FILE:
            continue
        if src.is_file():
            os.replace(src, dst)
        elif dst.is_file() and name != rundir.MEMORY_SNAPSHOT_FILE:
            dst.unlink()
    for trace in rundir.find_traces(run_dir):
        trace.unlink()  # the starting process's own window (it did not train)
    for trace in rundir.find_traces(lead.dir):
        os.replace(trace, run_dir / trace.name)
    rundir.write_json(run_dir / rundir.OBSERVATIONS_FILE, merged)
    shutil.rmtree(lead.dir, ignore_errors=True)


def _first_failure(trainers: list[_Trainer]) -> _Trainer | None:
    """The trainer that failed first: the others' errors are usually its consequence (gloo's
    "Connection closed by peer" in the ranks that waited for it)."""
    failed = [t for t in trainers if t.observations.get("error")]

    def when(t: _Trainer) -> float:
        at = t.observations.get("error_at_unix")
        return float(at) if isinstance(at, (int, float)) else float("inf")

    return min(failed, key=when) if failed else None


def _note_failure(run_dir: Path, failed: _Trainer, several: bool) -> None:
    """A trainer that crashed names the run's error when the starting process did not."""
    obs = _read_obs(run_dir) or {}
    error = str(failed.observations.get("error"))
    obs["error"] = f"{_name(failed)}: {error}" if several else error
    rundir.write_json(run_dir / rundir.OBSERVATIONS_FILE, obs)


def _name(trainer: _Trainer) -> str:
    info = trainer.process
    if trainer.rank is not None:
        return f"rank {trainer.rank}"
    return f"pid {info.get('pid')}"


def _root_process(root_obs: dict[str, Any]) -> dict[str, Any]:
    dist = root_obs.get("dist") if isinstance(root_obs.get("dist"), dict) else {}
    return {
        "pid": None,
        "kind": "perfdoctor-child",
        "rank": dist.get("rank") if dist else None,
        "world_size": dist.get("world_size") if dist else None,
    }


def _read_obs(path: Path) -> dict[str, Any] | None:
    try:
        data = rundir.read_json(path / rundir.OBSERVATIONS_FILE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _wall_ms(path: Path) -> float | None:
    """The summed wall_ms of a steps.jsonl (None when unreadable)."""
    total = 0.0
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    wall = json.loads(line).get("wall_ms")
                    total += float(wall) if isinstance(wall, (int, float)) else 0.0
    except (OSError, ValueError, AttributeError):
        return None
    return round(total, 3)


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0
