"""Sizing runtime optimizations from what the baseline measured (pure: no torch).

One variant changes one thing. The dataloader-workers variant changes num_workers (and
nothing else): the training process keeps the intra-op threads the script gave it. Changing
those is cpu-threads' change (collect/appliers/cpu.py), its own variant, which counts the same
cores: the usable cores (the child's CPU affinity, one rank's share of it) less the workers.
Coupling the two hid what each did: on a busy 2-core machine the thread change (2 -> 1) alone
made compute 20-30x faster, and the report credited the workers with it.

DataLoader workers, sized from the baseline's measured split (num_workers=0): the data wait
per batch is what one process spends producing a batch (`data`), the rest of the step the
compute, on the script's T intra-op threads.
- CPU run: W workers bound the time per batch three ways, and the slowest bound is the
  prediction:
    loading  data / W (each worker turns out one batch per `data`);
    compute  the compute on T threads, slowed when busy workers and threads outnumber the
             cores (each runnable thread gets its fair share, cores / (threads + the
             loader's busy cores), the serial part likewise; Amdahl with the parallel
             fraction of rules/cpu.py, 0.75, gives the serial part and the CPU time);
    CPU      (data + the compute's CPU time) / cores: the cores do both sides' work.
  W ranges over 1..cores: when loading dominates, the main process mostly waits and needs
  no core of its own, so every core may load. The smallest W within 3% of the fastest
  prediction wins (each worker costs memory and start-up). The figures of the users' case,
  43 ms loading vs 6 ms compute on 2 threads, 2 cores: 1 worker 43 ms/batch (loading),
  2 workers 26 ms (CPU: (43 + 9.6) / 2), so 2 workers, against 49 ms without.
  Why the threads stay in this variant: in the model work is conserved, so fewer threads
  buy nothing (2 threads compute during 6 of each 26 ms, and a core they take from a worker
  is given back while they wait). What fewer threads do buy is freedom from OpenMP's
  contention (a team thread descheduled inside a parallel region stalls the others at its
  barrier), which no model of the split predicts and which only a measurement shows:
  benchmarks/dataloader_split.py on this 2-core machine, busy with other jobs (load 5-9),
  measured 389 ms/step with 2 workers + the script's 2 threads and 56 ms with 2 workers + 1
  thread (8.6x over the baseline against 1.06x). When it hurts, the threads must change,
  and that change is cpu-threads' (its own variant): `coupled_threads` names the count
  (cores - workers) for a variant of both ids, so the report credits each change with its
  own effect. A split measured on such a machine also counts the stalls as compute (291 ms
  of "compute" for ~6 ms of work): the sizing then gives fewer workers.
- CUDA run: the compute is on the GPU and the main process launches it: workers = data /
  compute plus one spare (for batches slower than the median), at most cores - 1, so the
  launching thread keeps a core (a preempted launch idles the GPU).
Without a usable measurement the child takes min(4, cores - 1) workers.

The parent passes the sizing to the child in its environment (RunSpec.env, recorded in
spec.json): WORKERS_ENV holds the worker count and WORKERS_WHY_ENV the one-line reason the
applier reports (docs/run-directory.md).

cpu-threads: `cpu_threads_target` is the thread count its applier sets, in both directions:
the usable cores less the DataLoader's workers (the same budget) and less the cores other
processes kept busy in the baseline (THREADS_RESERVE_ENV carries those to the applier).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from perfdoctor.model import Facts, Scalar
from perfdoctor.rules.cpu import FEWER_WORKERS_TARGET, thread_budget

WORKERS_ENV = "PERFDOCTOR_DATALOADER_WORKERS"
WORKERS_WHY_ENV = "PERFDOCTOR_DATALOADER_WORKERS_WHY"
# "1": the count is fewer workers than the script's own (0 allowed): the applier lowers the
# script's num_workers to it instead of keeping it (fewer_workers below).
WORKERS_FEWER_ENV = "PERFDOCTOR_DATALOADER_WORKERS_FEWER"
# cpu-threads: cores to leave to other processes (their busy cores in the baseline).
THREADS_RESERVE_ENV = "PERFDOCTOR_CPU_THREADS_RESERVE"
# dataloader-workers' record when its workers ran in a persistent twin loader (in-process
# A/B): fixes.patch then sets persistent_workers=True beside num_workers, as measured.
TWIN_DETAIL = "in a persistent twin loader"
# cpu-threads' record of its count in a coupled arm (beside dataloader-workers' twin loader):
# fixes.patch reads the count of a coupled variant from it.
COUPLED_DETAIL = "beside the twin loader's {workers} DataLoader workers held at {threads}"
COUPLED_THREADS_PATTERN = r"beside the twin loader's \d+ DataLoader workers held at (\d+)"
CPU_MAX_WORKERS = 4  # workers without a measurement: the training's own threads need cores
SPARE_WORKERS = 1  # CUDA runs: on top of data / compute, for batches slower than the median
# Amdahl's parallel fraction of a CPU step's compute (rules/cpu.py, assumed_parallel_fraction).
PARALLEL_FRACTION = 0.75
# Fewer workers win when their predicted time per batch is within this of the fastest.
FEWER_WORKERS_TOLERANCE = 0.03


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
    reason: str  # one line for the child's record, e.g. "data 43 ms/batch vs 6.0 ms compute; ..."
    # What the variant leaves alone and why (the threads), for the progress display only.
    note: str = ""
    # CPU runs whose script threads beside these workers outnumber the cores: the threads
    # the budget leaves (cores - workers, at least 1, below the script's), which cpu-threads
    # holds when stacked with this variant. A coupled variant (both ids) measures that
    # change apart from the workers; None when there is none to make. Never in the child's
    # environment.
    coupled_threads: int | None = None
    # Fewer workers than the script's own count (which the applier then lowers).
    fewer: bool = False
    # What the split predicts the workers buy: the baseline's time per batch (data +
    # compute) over the predicted one, and the figures it came from. Checked against the
    # measured speedup after the A/B (optimize/prediction.py). None: nothing predicted.
    predicted_speedup: float | None = None
    predicted_from: str = ""

    @property
    def summary(self) -> str:
        tail = f"; {self.note}" if self.note else ""
        return f"num_workers={self.workers} ({self.reason}){tail}"

    def env(self) -> dict[str, str]:
        env = {WORKERS_ENV: str(self.workers), WORKERS_WHY_ENV: self.reason}
        if self.fewer:
            env[WORKERS_FEWER_ENV] = "1"
        return env


def default_workers(cores: int) -> int:
    """The count without a measurement: min(4, cores - 1), at least one."""
    return max(1, min(CPU_MAX_WORKERS, cores - 1))


def budget_threads(cores: int, workers: int) -> int:
    """The intra-op threads left to the main process beside `workers` (at least one)."""
    return max(1, cores - workers)


def worker_cap(cores: int) -> int:
    """Most workers worth starting on a CUDA run: cores - 1, so the launching thread keeps a
    core."""
    return max(1, cores - 1)


def _number(value: Scalar) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


@dataclass(frozen=True)
class Split:
    """The baseline's step per batch, measured with num_workers=0."""

    data: float  # ms of loading per batch, in one process
    compute: float  # ms of the rest, on `threads` intra-op threads
    threads: int  # the script's intra-op threads (torch_num_threads; else the cores)
    threads_measured: bool = True


def measured_split(facts: FactSource, cores: int) -> Split | None:
    """Data and compute per batch from the baseline, or None when it does not measure them
    (no data wait or step time, or its loader already had workers: the wait left then is
    not the cost of loading a batch)."""
    if (_number(facts.get("dataloader_num_workers")) or 0) > 0:
        return None
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
    busy, span = _number(facts.get("gpu_busy_frac")), _number(facts.get("trace_step_ms_p50"))
    if facts.get("device_is_cuda") is True and busy is not None and span is not None:
        # The GPU's work can overlap the next batch's loading: it is compute all the same.
        compute = max(compute, busy * span)
    batches = max(1.0, _number(facts.get("micro_batches_per_step")) or 1.0)
    threads = _number(facts.get("torch_num_threads"))
    return Split(
        data / batches,
        max(0.0, compute / batches),
        max(1, int(threads or cores)),
        threads_measured=threads is not None,
    )


def _threads_note(split: Split) -> str:
    kept = f", {split.threads}" if split.threads_measured else ""
    return f"intra-op threads stay as the script has them{kept}"


def size_dataloader_workers(facts: FactSource, cores: int) -> WorkerSizing | None:
    """The worker count for the baseline's DataLoader from its measured split and the usable
    cores (one rank's share), or None when the baseline does not measure it (the child then
    uses default_workers); fewer than the script's own where those exceed the cores
    (fewer_workers). The intra-op threads are left as the script has them."""
    cores = max(1, int(cores))
    fewer = fewer_workers(facts, cores)
    if fewer is not None:
        return fewer
    split = measured_split(facts, cores)
    if split is None:
        return None
    head = f"data {_ms(split.data)} ms/batch"
    head += f" vs {_ms(split.compute)} ms compute" if split.compute > 0 else ", no compute left"
    if facts.get("device_is_cuda") is True:
        return _size_for_gpu(head, split, cores)
    return _size_for_cpu(head, split, cores, _number(facts.get("cpu_other_busy_cores")))


def _size_for_gpu(head: str, split: Split, cores: int) -> WorkerSizing:
    data, compute = split.data, split.compute
    cap = worker_cap(cores)
    wanted = math.ceil(round(data / compute, 6)) + SPARE_WORKERS if compute > 0 else cap
    workers = max(1, min(wanted, cap))
    reason = f"{head}; {_count(workers, 'worker')} on {_count(cores, 'core')}"
    if wanted > cap and compute > 0:
        reason += f" ({wanted} wanted, capped at cores - 1)"
    speedup, source = _prediction(split, workers, max(data / workers, compute))
    return WorkerSizing(workers, reason, _threads_note(split), None, False, speedup, source)


def _prediction(split: Split, workers: int, predicted_ms: float) -> tuple[float | None, str]:
    """The speedup the split predicts for `workers`, and the figures behind it."""
    before = split.data + split.compute
    if predicted_ms <= 0 or before <= 0:
        return None, ""
    return round(before / predicted_ms, 3), (
        f"data {_ms(split.data)} + compute {_ms(split.compute)} ms/batch -> "
        f"{_ms(predicted_ms)} ms/batch with {_count(workers, 'worker')}"
    )


def one_thread_ms(compute: float, threads: int) -> float:
    """The compute's time on one thread, which is also its CPU time (Amdahl)."""
    p = PARALLEL_FRACTION
    return compute / ((1 - p) + p / max(1, threads))


def predicted_batch_ms(split: Split, workers: int, cores: int) -> float:
    """A CPU run's time per batch with `workers` loading and the script's threads computing:
    the slowest of loading, compute (slowed by its fair share of the cores beside the busy
    workers) and the CPU bound. The compute's slowdown depends on how busy the workers are,
    which depends on the time per batch: the fixed point is found by bisection (the right
    side falls as the time grows, so there is one)."""
    data, threads = split.data, split.threads
    one = one_thread_ms(split.compute, threads)
    p = PARALLEL_FRACTION
    floor = max(data / max(1, workers), (data + one) / cores, split.compute)

    def compute_at(t: float) -> float:
        loading = min(float(workers), data / t) if t > 0 else float(workers)
        serial_share = min(1.0, cores / (1.0 + loading))
        parallel_share = min(1.0, cores / (threads + loading))
        return one * (1 - p) / serial_share + one * p / threads / parallel_share

    low, high = floor, max(floor, compute_at(floor))
    for _ in range(60):
        mid = (low + high) / 2
        if max(floor, compute_at(mid)) > mid:
            low = mid
        else:
            high = mid
    return high


def _size_for_cpu(head: str, split: Split, cores: int, others: float | None) -> WorkerSizing:
    predicted = {w: predicted_batch_ms(split, w, cores) for w in range(1, cores + 1)}
    best = min(predicted.values())
    workers = min(w for w, t in predicted.items() if t <= best * (1 + FEWER_WORKERS_TOLERANCE))
    reason = (
        f"{head} on {_count(split.threads, 'thread')}; {_count(workers, 'worker')} on "
        f"{_count(cores, 'core')}, {_ms(predicted[workers])} ms/batch predicted"
    )
    if workers > 1:
        reason += f" ({_count(workers - 1, 'worker')}: {_ms(predicted[workers - 1])})"
    note = _threads_note(split)
    budget = budget_threads(cores, workers)
    # The coupled change exists only when the budget's threads differ from the script's.
    coupled = budget if budget < split.threads and split.compute > 0 else None
    if workers + split.threads > cores and split.compute > 0:
        share = min(1.0, split.compute / predicted[workers])
        note += (
            f"; {_count(workers, 'worker')} + {_count(split.threads, 'thread')} on "
            f"{_count(cores, 'core')} while it computes ({share:.0%} of a batch): lowering "
            "the threads would be cpu-threads' change, a variant of its own"
        )
    if others is not None and others >= 0.5:
        note += f"; other processes kept {others:.1f} cores busy in the baseline"
    speedup, source = _prediction(split, workers, predicted[workers])
    return WorkerSizing(workers, reason, note, coupled, False, speedup, source)


def cpu_threads_target(facts: Facts) -> int | None:
    """The intra-op thread count the cpu-threads applier (collect/appliers/cpu.py) sets, up
    or down: the cores the run may use (its CPU affinity, its share of them per rank), less
    the training DataLoader's worker processes and the cores other processes kept busy
    (rules/cpu.py thread_budget). None when the cores were not observed."""
    budget = thread_budget(facts)
    return budget[0] if budget is not None else None


@dataclass(frozen=True)
class ThreadSizing:
    """cpu-threads on a busy machine: the cores other processes kept busy in the baseline,
    which the applier leaves them (THREADS_RESERVE_ENV), beside the workers it counts
    itself."""

    threads: int
    reserve: int

    @property
    def summary(self) -> str:
        return (
            f"{self.threads} intra-op thread(s): {self.reserve} core(s) left to the other "
            "processes that kept them busy in the baseline"
        )

    def env(self) -> dict[str, str]:
        return {THREADS_RESERVE_ENV: str(self.reserve)}


def size_cpu_threads(facts: Facts, cores: int) -> ThreadSizing | None:
    """The reserve for the applier where the baseline's machine was busy, else None (the
    applier then counts the usable cores less the workers, as it always has)."""
    budget = thread_budget(facts)
    if budget is None or budget[3] == 0:
        return None
    return ThreadSizing(budget[0], budget[3])


def sizing_env(optimizations: Sequence[str], sizings: Mapping[str, Sizing]) -> dict[str, str]:
    """Environment additions for a child applying `optimizations`: the sizing of each of
    them that was sized from the baseline."""
    env: dict[str, str] = {}
    for opt_id in optimizations:
        sizing = sizings.get(opt_id)
        if sizing is not None:
            env.update(sizing.env())
    return env


def fewer_workers(facts: FactSource, cores: int) -> WorkerSizing | None:
    """The script's own workers, lowered, where they leave the training process no core
    (dataloader-workers-exceed-cores: more than cores - 1) and the steps still wait for
    their batches (input-bound): the wait is then the hand-off of each batch from a worker
    (pickling, tensors passed as shared-memory file descriptors over a socket, workers
    scheduled beside the training threads), which more workers only add to. The count is
    FEWER_WORKERS_TARGET: in-process loading (0) has no hand-off at all, and on makemore and
    minGPT (a __getitem__ of a few tensor ops) it was the fastest count measured
    (benchmarks/README.md, "Public scripts: the misses measured"). None when the script's
    count fits the cores."""
    workers = _number(facts.get("dataloader_num_workers"))
    if not workers or workers <= max(0, int(cores) - 1):
        return None
    target = FEWER_WORKERS_TARGET
    wait = _number(facts.get("data_wait_ms_p50"))
    waited = f", {_ms(wait)} ms/batch waited" if wait is not None else ""
    reason = (
        f"{int(workers)} workers on {_count(int(cores), 'core')}{waited}: the wait is the "
        f"hand-off from the workers; num_workers {int(workers)} -> {target}"
    )
    return WorkerSizing(target, reason, "intra-op threads stay as the script has them", None, True)
