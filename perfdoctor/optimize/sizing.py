"""Sizing runtime optimizations from what the baseline measured (pure: no torch).

One CPU budget. The training process's intra-op threads and the DataLoader's worker
processes run on the same usable cores (the child's CPU affinity, one rank's share of it), so
the dataloader-workers sizing chooses both together: workers + intra-op threads <= cores.

DataLoader workers: with num_workers=0 the baseline's data wait per step is the whole cost of
producing its batches in the main process, and the rest of the step is the compute the
workers have to hide it behind. N workers produce N batches per "data time", so the loader
keeps up when N >= data / compute.
- CUDA run: the compute is on the GPU, so the main process needs few cores: workers =
  data / compute plus one spare (for batches slower than the median), at most cores - 1;
  the main process keeps the cores left (at least one thread).
- CPU run: the training itself uses the cores, and every core given to a worker is taken
  from the intra-op threads. Each split (W workers, cores - W threads) is predicted as
  max(compute with cores - W threads, data / W) per batch, the compute scaled by Amdahl's law
  with the parallel fraction the cpu-threads-below-cores rule uses (0.75, measured on a CNN
  here) from the thread count the baseline ran; the fastest split wins, fewer workers on a tie.
Without a usable measurement the child takes the budget without timing: min(4, cores - 1)
workers, the rest threads.

The parent passes the sizing to the child in its environment (RunSpec.env, recorded in
spec.json): WORKERS_ENV holds the worker count, THREADS_ENV the intra-op threads, and
WORKERS_WHY_ENV the one-line reason the applier reports (docs/run-directory.md).

cpu-threads: `cpu_threads_target` is the thread count its applier (collect/appliers/cpu.py)
sets: the usable cores less the DataLoader's workers, the same budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from perfdoctor.model import Facts, Scalar

WORKERS_ENV = "PERFDOCTOR_DATALOADER_WORKERS"
WORKERS_WHY_ENV = "PERFDOCTOR_DATALOADER_WORKERS_WHY"
THREADS_ENV = "PERFDOCTOR_INTRAOP_THREADS"
CPU_MAX_WORKERS = 4  # workers without a measurement: the training's own threads need cores
SPARE_WORKERS = 1  # CUDA runs: on top of data / compute, for batches slower than the median
# Amdahl's parallel fraction of a CPU step's compute (rules/cpu.py, assumed_parallel_fraction).
PARALLEL_FRACTION = 0.75


class FactSource(Protocol):
    def get(self, name: str) -> Scalar: ...


class Sizing(Protocol):
    """What a catalog entry's sizing hook returns: the child's environment, and one line
    for the progress display."""

    @property
    def summary(self) -> str: ...

    def env(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class WorkerSizing:
    workers: int
    threads: int  # intra-op threads the main process keeps: workers + threads <= cores
    reason: str  # one line, e.g. "data 51 ms/batch vs 4.1 ms compute; 14 workers + 2 ..."

    @property
    def summary(self) -> str:
        return f"num_workers={self.workers}, intra-op threads={self.threads} ({self.reason})"

    def env(self) -> dict[str, str]:
        return {
            WORKERS_ENV: str(self.workers),
            THREADS_ENV: str(self.threads),
            WORKERS_WHY_ENV: self.reason,
        }


def default_workers(cores: int) -> int:
    """The count without a measurement: min(4, cores - 1), at least one."""
    return max(1, min(CPU_MAX_WORKERS, cores - 1))


def budget_threads(cores: int, workers: int) -> int:
    """The intra-op threads left to the main process beside `workers` (at least one)."""
    return max(1, cores - workers)


def worker_cap(cores: int) -> int:
    """Most workers worth starting: cores - 1, so the main process keeps a core."""
    return max(1, cores - 1)


def _number(value: Scalar) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _budget_note(cores: int, workers: int, threads: int) -> str:
    note = f"{_count(workers, 'worker')} + {_count(threads, 'thread')} on {_count(cores, 'core')}"
    if workers + threads > cores:
        note += " (oversubscribed by one: the least possible)"
    return note


def size_dataloader_workers(facts: FactSource, cores: int) -> WorkerSizing | None:
    """Workers and intra-op threads for the baseline's DataLoader from one CPU budget, or
    None when the baseline does not measure it (the child then uses default_workers)."""
    cores = max(1, int(cores))
    if (_number(facts.get("dataloader_num_workers")) or 0) > 0:
        return None  # the wait left with workers is not the cost of loading a batch
    wait = _number(facts.get("data_wait_ms_p50"))
    step = _number(facts.get("step_ms_p50"))
    if wait is None or step is None or step <= 0:
        return None
    data = wait
    # Waits that come in bursts (a slow batch every few steps) hide from the median.
    frac, mean = _number(facts.get("data_wait_frac")), _number(facts.get("step_ms_mean"))
    if frac is not None and mean is not None:
        data = max(data, frac * mean)
    compute = step - wait
    cuda = facts.get("device_is_cuda") is True
    busy, span = _number(facts.get("gpu_busy_frac")), _number(facts.get("trace_step_ms_p50"))
    if cuda and busy is not None and span is not None:
        # The GPU's work can overlap the next batch's loading: it is compute all the same.
        compute = max(compute, busy * span)
    batches = max(1.0, _number(facts.get("micro_batches_per_step")) or 1.0)
    data, compute = data / batches, max(0.0, compute / batches)
    head = f"data {_ms(data)} ms/batch"
    head += f" vs {_ms(compute)} ms compute" if compute > 0 else ", no compute left"
    if cuda:
        return _size_for_gpu(head, data, compute, cores)
    threads_now = _number(facts.get("torch_num_threads"))
    return _size_for_cpu(head, data, compute, cores, int(threads_now or cores))


def _size_for_gpu(head: str, data: float, compute: float, cores: int) -> WorkerSizing:
    cap = worker_cap(cores)
    wanted = math.ceil(round(data / compute, 6)) + SPARE_WORKERS if compute > 0 else cap
    workers = max(1, min(wanted, cap))
    threads = budget_threads(cores, workers)
    reason = head
    if wanted > cap and compute > 0:
        reason += f"; {wanted} wanted, capped at cores - 1"
    return WorkerSizing(workers, threads, f"{reason}; {_budget_note(cores, workers, threads)}")


def predicted_batch_ms(
    data: float, compute: float, threads_now: int, workers: int, threads: int
) -> float:
    """A CPU run's time per batch with `workers` loading and `threads` computing: the slower
    of the two, the compute scaled from `threads_now` threads by Amdahl's law."""
    p = PARALLEL_FRACTION
    one_thread = compute / ((1 - p) + p / max(1, threads_now))
    return max(one_thread * ((1 - p) + p / max(1, threads)), data / max(1, workers))


def _size_for_cpu(
    head: str, data: float, compute: float, cores: int, threads_now: int
) -> WorkerSizing:
    best: tuple[float, int, int] | None = None
    for workers in range(1, worker_cap(cores) + 1):
        threads = budget_threads(cores, workers)
        predicted = predicted_batch_ms(data, compute, threads_now, workers, threads)
        if best is None or predicted < best[0] * (1 - 1e-9):
            best = (predicted, workers, threads)
    assert best is not None  # worker_cap is at least one
    predicted, workers, threads = best
    reason = (
        f"{head}; {_budget_note(cores, workers, threads)}, "
        f"the fastest split ({_ms(predicted)} ms/batch predicted)"
    )
    return WorkerSizing(workers, threads, reason)


def cpu_threads_target(facts: Facts) -> int | None:
    """The intra-op thread count the cpu-threads applier (collect/appliers/cpu.py) sets:
    the cores the run may use (its CPU affinity, its share of them per rank), minus the
    training DataLoader's worker processes. None when the cores were not observed."""
    cpu = facts.settings.get("cpu") if isinstance(facts.settings, dict) else None
    affinity = cpu.get("affinity_cores") if isinstance(cpu, dict) else None
    cores = affinity if isinstance(affinity, int) and affinity > 0 else None
    if cores is None:
        logical = _number(facts.get("cpu_cores_logical"))
        cores = int(logical) if logical else None
    if cores is None:
        return None
    ranks = int(_number(facts.get("ranks_launched")) or 1)
    usable = max(1, cores // max(1, ranks))
    workers = int(_number(facts.get("dataloader_num_workers")) or 0)
    return budget_threads(usable, workers)


def sizing_env(optimizations: Sequence[str], sizings: Mapping[str, Sizing]) -> dict[str, str]:
    """Environment additions for a child applying `optimizations`: the sizing of each of
    them that was sized from the baseline."""
    env: dict[str, str] = {}
    for opt_id in optimizations:
        sizing = sizings.get(opt_id)
        if sizing is not None:
            env.update(sizing.env())
    return env
