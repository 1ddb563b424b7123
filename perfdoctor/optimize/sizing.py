"""Sizing runtime optimizations from what the baseline measured (pure: no torch).

DataLoader workers: with num_workers=0 the baseline's data wait per step is the whole cost of
producing its batches in the main process, and the rest of the step is the compute the
workers have to hide it behind. N workers produce N batches per "data time", so the loader
keeps up when N >= data / compute; one spare worker absorbs slow batches. The count is capped
by the cores the workers can have: on a CUDA run the compute is on the GPU and only the main
process needs a core (cores - 1); on a CPU run the training itself uses the cores, so the cap
stays min(4, cores) (measured: 2 workers on 2 cores took the CNN sample from 61 to 42
ms/step). Without a usable measurement the child keeps that min(4, cores) default.

The parent passes the count to the child in its environment (RunSpec.env, recorded in
spec.json): WORKERS_ENV holds the count, WORKERS_WHY_ENV the one-line reason the applier
reports (docs/run-directory.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from perfdoctor.model import Scalar

WORKERS_ENV = "PERFDOCTOR_DATALOADER_WORKERS"
WORKERS_WHY_ENV = "PERFDOCTOR_DATALOADER_WORKERS_WHY"
WORKERS_OPTIMIZATION = "dataloader-workers"
CPU_MAX_WORKERS = 4  # CPU runs: the training's own threads need the cores
SPARE_WORKERS = 1  # on top of data / compute, for batches slower than the median


class FactSource(Protocol):
    def get(self, name: str) -> Scalar: ...


@dataclass(frozen=True)
class WorkerSizing:
    workers: int
    reason: str  # one line, e.g. "data 51 ms/batch vs 4.1 ms compute"

    def env(self) -> dict[str, str]:
        return {WORKERS_ENV: str(self.workers), WORKERS_WHY_ENV: self.reason}


def default_workers(cores: int) -> int:
    """The count without a measurement: min(4, cores)."""
    return max(1, min(CPU_MAX_WORKERS, cores))


def worker_cap(cores: int, cuda: bool) -> int:
    """Most workers worth starting: cores - 1 when the compute is on a GPU, else min(4, cores)."""
    return max(1, cores - 1) if cuda else default_workers(cores)


def _number(value: Scalar) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def size_dataloader_workers(facts: FactSource, cores: int) -> WorkerSizing | None:
    """Workers for the baseline's DataLoader so that it keeps up with the step, or None when
    the baseline does not measure it (the child then uses default_workers)."""
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
    cap = worker_cap(cores, cuda)
    per_batch = f"data {_ms(data / batches)} ms/batch"
    if compute <= 0:
        return WorkerSizing(cap, f"{per_batch}, no compute left; {_cap_note(cores, cuda)}")
    wanted = math.ceil(round(data / compute, 6)) + SPARE_WORKERS
    reason = f"{per_batch} vs {_ms(compute / batches)} ms compute"
    if wanted > cap:
        reason += f"; {wanted} wanted, {_cap_note(cores, cuda)}"
    return WorkerSizing(max(1, min(wanted, cap)), reason)


def _cap_note(cores: int, cuda: bool) -> str:
    cap = worker_cap(cores, cuda)
    if cuda:
        return f"capped at {cap}: {cores} cores less one for the main process"
    return f"capped at {cap}: min({CPU_MAX_WORKERS}, {cores} cores) on a CPU run"


def sizing_env(optimizations: Sequence[str], sizing: WorkerSizing | None) -> Mapping[str, str]:
    """Environment additions for a child applying `optimizations`."""
    if sizing is None or WORKERS_OPTIMIZATION not in optimizations:
        return {}
    return sizing.env()
