"""Multi-rank child runs: `perfdoctor profile --nproc-per-node N` with N > 1.

One child run is N ranks of the bootstrap, started as `torchrun --standalone
--nproc-per-node N` starts its workers and supervised as one run:

- rank 0 is the child: it writes the run directory exactly as a single-process child does
  (trace, memory snapshot, steps, observations; the parent adds samples and the manifest);
- rank k >= 1 keeps a small record in `<run_dir>/ranks/<k>/` (spec.json, manifest.json,
  observations.json, steps.jsonl, progress.jsonl, stdout.log, stderr.log): the same plan,
  without a profiler window or memory history. docs/run-directory.md has the layout.
- The first rank that exits non-zero or dies fails the run: the other ranks are stopped at
  once (they would wait in a collective forever), and rank 0's manifest carries that rank's
  status, exit code and error line. --timeout and Ctrl-C stop every rank.
- The sampler follows rank 0 and its workers as for one process; the other ranks' CPU use
  is sampled beside it (`ranks_cpu_percent`) so it does not count as other processes' load.

Environment of rank k, as torch 2.13's LocalElasticAgent._start_workers sets it
(torch/distributed/elastic/agent/server/local_elastic_agent.py) for one node:
RANK = LOCAL_RANK = ROLE_RANK = k; WORLD_SIZE = LOCAL_WORLD_SIZE = ROLE_WORLD_SIZE = N;
GROUP_RANK = 0, GROUP_WORLD_SIZE = 1, ROLE_NAME = "default"; MASTER_ADDR = 127.0.0.1 and
MASTER_PORT = a port free when the run starts; TORCHELASTIC_RUN_ID (a fresh id per run),
TORCHELASTIC_RESTART_COUNT = 0, TORCHELASTIC_MAX_RESTARTS = 0;
TORCH_NCCL_ASYNC_ERROR_HANDLING as inherited, else 1; OMP_NUM_THREADS = 1 unless it is set
(torch/distributed/run.py does that for N > 1). Two differ on purpose:
TORCHELASTIC_USE_AGENT_STORE is "False" (there is no agent whose TCPStore the ranks could
share, so rank 0 hosts the env:// rendezvous store, as under torchrun with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), and TORCHELASTIC_ERROR_FILE is not set (the rank's
error line comes from its observations instead). PERFDOCTOR_RANK tells the bootstrap which
rank it is.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfdoctor.collect.cpu_sampler import CpuSampler
from perfdoctor.collect.launcher import (
    ENTRY_CODE,
    GRACE_S,
    Progress,
    _child_env,
    _end_leftovers,
    _Outcome,
    _remove_stale_artifacts,
    _signal_group,
    _Tee,
    _Watch,
    _write_manifest,
)
from perfdoctor.collect.nvml import NvmlSampler
from perfdoctor.collect.sampling import DEFAULT_PERIOD_S, SamplingThread
from perfdoctor.model import RunManifest, RunSpec
from perfdoctor.rundir import (
    SAMPLES_FILE,
    SPEC_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    rank_dir,
    write_json,
)

logger = logging.getLogger(__name__)

# Read by the bootstrap (perfdoctor.collect.bootstrap.RANK_ENV).
RANK_ENV = "PERFDOCTOR_RANK"
MASTER_ADDR = "127.0.0.1"
# The others of a failed rank are usually blocked in a collective, where SIGTERM's Python
# handler cannot run until the collective returns (gloo's default timeout is 30 minutes):
# a short grace for the ones that can still flush, then SIGKILL.
PEER_GRACE_S = 2.0
POLL_S = 0.02  # short: the first rank to fail is the one seen exiting first


@dataclass
class _Rank:
    rank: int
    spec: RunSpec
    run_dir: Path
    watch: _Watch
    proc: subprocess.Popen[bytes] | None = None
    tees: list[_Tee] = field(default_factory=list)
    exit_code: int | None = None
    exited_at: float | None = None
    stopped: bool = False  # perfdoctor ended it (another rank failed, timeout, Ctrl-C)
    spawn_error: str | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.exit_code is None


@dataclass
class _GroupEnd:
    failed: _Rank | None = None
    timed_out: bool = False
    interrupted: bool = False
    internal_error: str | None = None


def rank_environment(rank: int, nproc: int, port: int, run_id: str) -> dict[str, str]:
    """What torchrun --standalone gives worker `rank` of `nproc` (module docstring)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        RANK_ENV: str(rank),
    }


def free_port() -> int:
    """A TCP port free on MASTER_ADDR now (the OS picks it; rank 0 binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((MASTER_ADDR, 0))
        return int(sock.getsockname()[1])


def rank_spec(spec: RunSpec, rank: int) -> RunSpec:
    """Rank k's spec: rank 0's plan and optimizations, its own directory, no memory history.

    `profile` stays as rank 0 has it, so the plan (profiled steps included) is the same on
    every rank; the bootstrap opens no profiler window on ranks >= 1.
    """
    if rank == 0:
        return spec
    return replace(
        spec, run_dir=str(rank_dir(Path(spec.run_dir), rank)), record_memory_history=False
    )


def launch_ranks(
    spec: RunSpec,
    nproc: int,
    *,
    timeout_s: float | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    echo_output: bool = True,
    python: str = sys.executable,
) -> RunManifest:
    """Run the N ranks of one child run to their end; return (and write) rank 0's manifest."""
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_artifacts(run_dir)  # ranks/ of an earlier run included
    ranks: list[_Rank] = []
    for k in range(nproc):
        k_spec = rank_spec(spec, k)
        k_dir = Path(k_spec.run_dir)
        k_dir.mkdir(parents=True, exist_ok=True)
        write_json(k_dir / SPEC_FILE, k_spec)
        ranks.append(
            _Rank(k, k_spec, k_dir, _Watch(k_spec, k_dir, on_progress if k == 0 else None))
        )
    lead = ranks[0].watch
    lead.start_clock()
    for r in ranks[1:]:
        r.watch.t0, r.watch.t0_unix = lead.t0, lead.t0_unix
    port, run_id = free_port(), f"perfdoctor-{uuid.uuid4().hex[:12]}"

    sampler: SamplingThread | None = None
    end = _GroupEnd()
    pending: BaseException | None = None
    try:
        for r in ranks:
            _spawn(r, nproc, port, run_id, python, echo_output and r.rank == 0)
            if r.spawn_error is not None:
                break
        if all(r.proc is not None for r in ranks):
            env_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
            peers = [r.proc.pid for r in ranks[1:] if r.proc is not None]
            lead_pid = ranks[0].proc.pid if ranks[0].proc is not None else 0
            sampler = SamplingThread(
                [NvmlSampler(visible_devices=env_devices), CpuSampler(lead_pid, peers=peers)],
                run_dir / SAMPLES_FILE,
                origin=lead.t0,
                origin_unix=lead.t0_unix,
                period_s=DEFAULT_PERIOD_S,
            )
            sampler.start()
            end = _supervise(ranks, timeout_s)
        else:  # a rank could not be started: the run fails as that rank did
            _stop(ranks, PEER_GRACE_S)
            end = _GroupEnd(failed=next(r for r in ranks if r.spawn_error is not None))
    except BaseException as err:  # KeyboardInterrupt, or a failing on_progress callback
        pending = err
        end = _GroupEnd(interrupted=True)
        if not isinstance(err, KeyboardInterrupt):
            end.internal_error = f"perfdoctor: {type(err).__name__}: {err}"
        _stop(ranks, GRACE_S)
    finally:
        manifest = _finish(ranks, end, sampler)
    if pending is not None:
        raise pending
    return manifest


def _spawn(r: _Rank, nproc: int, port: int, run_id: str, python: str, echo: bool) -> None:
    env = _child_env(r.spec, r.watch.t0_unix)
    env.update(rank_environment(r.rank, nproc, port, run_id))
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun for N > 1 (module docstring)
    try:
        r.proc = subprocess.Popen(
            [python, "-c", ENTRY_CODE, str(r.run_dir / SPEC_FILE)],
            cwd=r.spec.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killpg reaches its workers
        )
    except OSError as err:
        where = f"working directory {r.spec.cwd}" if not Path(r.spec.cwd).is_dir() else python
        r.spawn_error = f"{where}: {err.strerror or err}"
        return
    r.tees = [
        _Tee(r.proc.stdout, r.run_dir / STDOUT_FILE, sys.stdout if echo else None),
        _Tee(r.proc.stderr, r.run_dir / STDERR_FILE, sys.stderr if echo else None),
    ]
    for tee in r.tees:
        tee.start()


def _supervise(ranks: list[_Rank], timeout_s: float | None) -> _GroupEnd:
    lead = ranks[0].watch
    while True:
        lead.poll()
        now = time.monotonic()
        for r in ranks:
            if r.running and r.proc is not None:
                code = r.proc.poll()
                if code is not None:
                    r.exit_code, r.exited_at = code, now
        failed = [r for r in ranks if r.exit_code not in (None, 0)]
        if failed:
            first = min(failed, key=lambda r: (r.exited_at or now, r.rank))
            logger.info("rank %d exited with %s: stopping the others", first.rank, first.exit_code)
            _stop(ranks, PEER_GRACE_S)
            return _GroupEnd(failed=first)
        if not any(r.running for r in ranks):
            return _GroupEnd()
        if timeout_s is not None and now - lead.t0 > timeout_s:
            logger.info("timeout after %.1f s: stopping every rank", timeout_s)
            _stop(ranks, GRACE_S)
            return _GroupEnd(timed_out=True)
        time.sleep(POLL_S)


def _stop(ranks: list[_Rank], grace_s: float) -> None:
    """SIGTERM every running rank's group, `grace_s` to flush, then SIGKILL what is left.

    A second Ctrl-C during the grace period skips the rest of it.
    """
    running = [r for r in ranks if r.running]
    for r in running:
        r.stopped = True
        if r.proc is not None:
            _signal_group(r.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        while any(r.running for r in running) and time.monotonic() < deadline:
            for r in running:
                if r.running and r.proc is not None and r.proc.poll() is not None:
                    r.exit_code, r.exited_at = r.proc.returncode, time.monotonic()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        logger.info("second interrupt: killing the ranks")
    for r in running:
        if r.running and r.proc is not None:
            _signal_group(r.proc.pid, signal.SIGKILL)
            r.exit_code, r.exited_at = r.proc.wait(), time.monotonic()


def _finish(ranks: list[_Rank], end: _GroupEnd, sampler: SamplingThread | None) -> RunManifest:
    """Reap every rank, stop sampling and output, write the manifests: ranks >= 1 first."""
    for r in ranks:
        if r.proc is not None and r.exit_code is None:
            r.exit_code, r.exited_at = r.proc.wait(), time.monotonic()
    left_behind = [r.rank for r in ranks if r.proc is not None and _end_leftovers(r.proc.pid)]
    if sampler is not None:
        sampler.stop()
    for r in ranks:
        for tee in r.tees:
            if tee.is_alive():
                tee.join(5.0)
        try:
            r.watch.poll()
        except Exception:  # a failing display must not cost the manifest
            logger.debug("progress callback failed", exc_info=True)
    spawn_failed = next((r for r in ranks if r.spawn_error is not None), None)
    manifests: dict[int, RunManifest] = {}
    for r in reversed(ranks):
        outcome = _outcome(r, end, spawn_failed)
        if r.rank in left_behind:
            outcome.warnings.append("processes the script left behind were terminated")
        adjust = _group_status(end, manifests) if r.rank == 0 else None
        manifests[r.rank] = _write_manifest(r.spec, r.run_dir, outcome, r.watch, adjust)
    return manifests[0]


def _outcome(r: _Rank, end: _GroupEnd, spawn_failed: _Rank | None) -> _Outcome:
    outcome = _Outcome(exit_code=r.exit_code)
    outcome.wall_s = (r.exited_at or time.monotonic()) - r.watch.t0
    if r.spawn_error is not None:
        outcome.spawn_error = r.spawn_error
    elif r.proc is None and spawn_failed is not None:
        outcome.spawn_error = f"not started: rank {spawn_failed.rank} could not be started"
    outcome.timed_out = end.timed_out
    outcome.interrupted = end.interrupted or (r.stopped and not end.timed_out)
    outcome.internal_error = end.internal_error
    if r.stopped and end.failed is not None and end.failed is not r:
        outcome.warnings.append(
            f"stopped by perfdoctor: rank {end.failed.rank} failed first "
            f"(exit code {end.failed.exit_code})"
        )
    if len(r.tees) == 2:
        outcome.stderr_tail = r.tees[1].tail
    return outcome


def _group_status(
    end: _GroupEnd, manifests: dict[int, RunManifest]
) -> Callable[[RunManifest], RunManifest]:
    """Rank 0's manifest is the run's: its status follows the rank that failed first."""

    def adjust(own: RunManifest) -> RunManifest:
        failed = end.failed
        if failed is None or failed.rank == 0 or failed.rank not in manifests:
            return own
        theirs = manifests[failed.rank]
        what = theirs.error or f"exited with code {theirs.exit_code}"
        warnings = [
            f"rank {failed.rank} failed first ({theirs.status}, exit code {theirs.exit_code}): "
            f"{what}; the other ranks were stopped",
            *own.warnings,
        ]
        return replace(
            own,
            status=theirs.status,
            exit_code=theirs.exit_code,
            error=f"rank {failed.rank}: {what}",
            warnings=tuple(dict.fromkeys(warnings)),
        )

    return adjust
