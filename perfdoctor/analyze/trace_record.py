"""A RunRecord built from profiler traces alone (`perfdoctor diagnose`), with no perfdoctor run.

Steps are the trace's `ProfilerStep#N` spans: they become the record's timed steps, so every
step-timing fact (step_ms_p50, data_wait_frac, ...) comes out of the same code as for a
perfdoctor run, but from the profiled steps, which carry the profiler's own overhead (the
report says so). Data wait per step is the DataLoader `__next__` spans inside the step. What
only a perfdoctor run records (the loss, NVML samples, the script's settings observed at run
time, forward/backward phases) stays unknown, and the rules that need it are skipped.

Several ranks of one run: the lowest rank is the record itself, the others are `ranks`
(RankRecord, as `--nproc-per-node` runs have them), and `rank_summaries` holds the per-rank
figures the report's per-rank table shows.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfdoctor.analyze import intervals, job_ranks
from perfdoctor.analyze.dataloading import DATALOADER_PREFIXES
from perfdoctor.analyze.job_ranks import JobWaits
from perfdoctor.analyze.memory import load_memory
from perfdoctor.analyze.record import RankRecord, RunRecord
from perfdoctor.analyze.run_stats import median_or_none
from perfdoctor.analyze.trace import TraceSummary, summarize_trace
from perfdoctor.analyze.trace_events import TraceEvents, parse_trace
from perfdoctor.analyze.trace_index import Steps, find_steps, rows_named, union_by_thread
from perfdoctor.analyze.trace_inputs import RankInput, RunInput
from perfdoctor.analyze.trace_meta import NVIDIA, parse_device_properties
from perfdoctor.errors import CorruptArtifact
from perfdoctor.model import DeviceInfo, RankSummary, StepRecord

log = logging.getLogger(__name__)

MULTI_PROCESS_ITER = "_MultiProcessingDataLoaderIter"
SINGLE_PROCESS_ITER = "_SingleProcessDataLoaderIter"
# deviceProperties of AMD GPUs carry computeMajor/Minor of the gfx architecture (gfx90a ->
# 9.0), which is no CUDA compute capability: a MI250 is not a Hopper.


@dataclass(frozen=True)
class TraceRunRecord(RunRecord):
    """RunRecord of a run seen only through its traces; `source` tells facts.py so."""

    source: str = "trace"
    run_name: str = ""
    inputs: tuple[str, ...] = ()
    device: DeviceInfo | None = None
    gpu_vendor: str | None = None  # "nvidia" or "amd", from deviceProperties
    distributed: dict[str, Any] | None = None
    # "multi" (_MultiProcessingDataLoaderIter: workers > 0), "single" (num_workers=0), None
    dataloader_iter: str | None = None
    rank_summaries: tuple[RankSummary, ...] = ()
    # Which traced rank the others wait for in their collectives (job_ranks.py); the
    # record's own trace is that rank's.
    job: JobWaits | None = None
    # Traces found with the run that are not of its job (one_job): each gets its own report.
    strays: tuple[RankInput, ...] = ()


@dataclass(frozen=True)
class _RankTrace:
    rank: int | None
    source: RankInput
    summary: TraceSummary
    steps: tuple[StepRecord, ...]
    distributed: dict[str, Any] | None
    device: DeviceInfo | None
    vendor: str | None
    dataloader_iter: str | None
    comm_ms_per_step: float | None
    start_epoch_us: float | None = None  # when the trace begins, where it says (epoch µs)


# --------------------------------------------------------------------------- device


def device_from_properties(
    props: tuple[dict[str, Any], ...], used: int | None, has_gpu_work: bool
) -> tuple[DeviceInfo | None, str | None]:
    """The training GPU from `deviceProperties` (trace_meta.parse_device reads each entry):
    the entry of the device the kernels ran on; its vendor in lower case. A compute
    capability only for NVIDIA: AMD's gfx9 is not Hopper's 9.0."""
    parsed = parse_device_properties(props)
    if not parsed:
        if has_gpu_work:
            return DeviceInfo(kind="cuda", name="GPU (no deviceProperties in the trace)"), None
        return None, None
    chosen = next((d for d in parsed if d.index == used), parsed[0])
    vendor = (chosen.vendor or NVIDIA).lower()  # CUDA when the properties do not say
    cc = chosen.compute_capability
    device = DeviceInfo(
        kind="cuda",
        name=chosen.name or "GPU",
        count=1,
        total_memory_bytes=chosen.memory_bytes,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
    )
    return device, vendor


def _device_used(ev: TraceEvents) -> int | None:
    devices = ev.gpu.extra.get("device") if len(ev.gpu) else None
    if devices is None or devices.size == 0:
        return None
    values, counts = np.unique(devices[devices >= 0], return_counts=True)
    return int(values[np.argmax(counts)]) if values.size else None


# --------------------------------------------------------------------------- steps


def _dataloader_iter(ev: TraceEvents) -> str | None:
    names = [n for n in ev.names if n.startswith(DATALOADER_PREFIXES)]
    if any(MULTI_PROCESS_ITER in n for n in names):
        return "multi"
    if any(SINGLE_PROCESS_ITER in n for n in names):
        return "single"
    return None


def _data_wait_per_step(ev: TraceEvents, steps: Steps) -> list[float] | None:
    """Per step, the time inside DataLoader __next__ spans (union over the step's threads).

    None when the trace has no DataLoader span at all: the loop then feeds itself some other
    way, and how long that takes is unknown, not zero.
    """
    is_dl = ev.code_mask(lambda n: n.startswith(DATALOADER_PREFIXES))
    spans = [(table, rows_named(table, is_dl)) for table in (ev.annotations, ev.cpu_ops)]
    if all(rows.size == 0 for _, rows in spans):
        return None
    by_thread = union_by_thread(spans)
    lo, hi = steps.starts.astype(np.float64), steps.ends.astype(np.float64)
    total = np.zeros(lo.shape, dtype=np.float64)
    for us, ue in by_thread.values():
        total += intervals.time_in_windows(us, ue, lo, hi)
    return (total / 1000.0).tolist()


def steps_from_trace(ev: TraceEvents) -> tuple[StepRecord, ...]:
    """One StepRecord per ProfilerStep span, as the record's timed steps."""
    steps = find_steps(ev)
    if not steps.count:
        return ()
    waits = _data_wait_per_step(ev, steps)
    durations = steps.durations_ms().tolist()
    return tuple(
        StepRecord(
            index=number,
            phase="timed",
            wall_ms=float(ms),
            data_wait_ms=waits[i] if waits is not None else None,
        )
        for i, (number, ms) in enumerate(zip(steps.numbers, durations, strict=True))
    )


def _usable(ev: TraceEvents) -> bool:
    tables = (ev.cpu_ops, ev.annotations, ev.python, ev.gpu, ev.runtime)
    return any(len(t) for t in tables)


# --------------------------------------------------------------------------- ranks


def _comm_ms_per_step(summary: TraceSummary, step_p50: float | None) -> float | None:
    """Communication per step: GPU-side where the trace has collective kernels (their
    duration includes waiting for the peers), else the host's collective ops.

    GpuSummary fields are read with getattr: the GPU analysis is being reworked, and an
    exposed-communication share, where it exists, is the better figure.
    """
    if step_p50 is None:
        return None
    gpu = summary.gpu
    exposed = getattr(gpu, "comm_exposed_frac", None)
    if isinstance(exposed, (int, float)):
        return float(exposed) * step_p50
    kernel_frac = getattr(gpu, "comm_kernel_frac", None)
    if isinstance(kernel_frac, (int, float)) and kernel_frac > 0:
        busy = getattr(gpu, "busy_frac", None)
        busy = float(busy) if isinstance(busy, (int, float)) else 1.0
        return float(kernel_frac) * busy * step_p50
    if summary.comm_frac is not None:
        return min(1.0, float(summary.comm_frac)) * step_p50
    return None


def _read_rank(source: RankInput) -> _RankTrace:
    ev = parse_trace(source.trace)
    if not _usable(ev):
        raise CorruptArtifact(
            f"{source.trace} holds no profiler events perfdoctor can read (no cpu_op, "
            "user_annotation, kernel or runtime events)"
        )
    summary = summarize_trace(ev)
    steps = steps_from_trace(ev)
    dist = ev.distributed if isinstance(ev.distributed, dict) else None
    rank = dist.get("rank") if dist else None
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = source.rank_from_name
    device, vendor = device_from_properties(
        tuple(ev.device_properties), _device_used(ev), len(ev.gpu) > 0
    )
    walls = [s.wall_ms for s in steps]
    p50 = median_or_none(walls)
    return _RankTrace(
        rank=rank,
        source=source,
        summary=summary,
        steps=steps,
        distributed=dist,
        device=device,
        vendor=vendor,
        dataloader_iter=_dataloader_iter(ev),
        comm_ms_per_step=_comm_ms_per_step(summary, p50),
        start_epoch_us=_start_epoch_us(ev),
    )


# A timestamp past this (µs) is since the epoch (2001 on): kineto writes epoch time, or
# times relative to baseTimeNanoseconds; anything smaller is a clock of its own.
_EPOCH_US_MIN = 1e15
# Ranks of one job are traced within the same profiling window: starts further apart than
# this are not one job (a choice: an hour is far beyond any schedule's skew).
JOB_START_SPREAD_US = 3600e6


def _start_epoch_us(ev: TraceEvents) -> float | None:
    tables = [t for t in (ev.cpu_ops, ev.annotations, ev.runtime, ev.gpu, ev.python) if len(t)]
    if not tables:
        return None
    first = float(min(t.ts.min() for t in tables))
    base = ev.base_time_ns
    if isinstance(base, (int, float)) and not isinstance(base, bool) and base > 0:
        first += float(base) / 1000.0
    return first if first >= _EPOCH_US_MIN else None


def _job_key(r: _RankTrace) -> tuple[Any, Any, bool]:
    """What every rank of one job shares: world size, backend, and GPU work or none."""
    dist = r.distributed or {}
    return (dist.get("world_size"), dist.get("backend"), len_gpu_work(r))


def _describe(key: tuple[Any, Any, bool]) -> str:
    world, backend, gpu = key
    parts = [f"world size {world}" if world is not None else "no distributedInfo"]
    if backend:
        parts.append(str(backend))
    parts.append("GPU work" if gpu else "no GPU work")
    return ", ".join(parts)


def one_job(ranks: list[_RankTrace]) -> tuple[list[_RankTrace], list[tuple[_RankTrace, str]]]:
    """The ranks that form one job, and the others with why they are not of it. The job is
    the largest group sharing world size, backend and GPU work, recorded within an hour of
    each other; a folder holding a job's 8 ranks and an unrelated CPU trace of a 300-rank
    gloo job merged the stray as "rank 34" (a 1,579.7% step spread) without a word."""
    if len(ranks) < 2:
        return ranks, []
    # Identity, not equality: a rank's summary holds arrays.
    groups: dict[tuple[Any, Any, bool], list[int]] = {}
    for i, r in enumerate(ranks):
        groups.setdefault(_job_key(r), []).append(i)
    key = max(groups, key=lambda k: (len(groups[k]), -groups[k][0]))
    job = [ranks[i] for i in groups[key]]
    strays = [
        (r, f"{_describe(_job_key(r))}, against {_describe(key)} for the job")
        for r in ranks
        if _job_key(r) != key
    ]
    starts = [r.start_epoch_us for r in job if r.start_epoch_us is not None]
    if starts:
        mid = float(np.median(starts))
        far = [
            r
            for r in job
            if r.start_epoch_us is not None and abs(r.start_epoch_us - mid) > JOB_START_SPREAD_US
        ]
        for r in far:
            hours = abs(r.start_epoch_us - mid) / 3600e6  # type: ignore[operator]
            strays.append((r, f"recorded {hours:,.1f} h apart from the job's other traces"))
        gone = {id(r) for r in far}
        job = [r for r in job if id(r) not in gone]
    world = key[0]
    if isinstance(world, int) and world > 0:
        beyond = [r for r in job if r.rank is not None and r.rank >= world]
        for r in beyond:
            strays.append((r, f"rank {r.rank} in a job of world size {world}"))
        gone = {id(r) for r in beyond}
        job = [r for r in job if id(r) not in gone]
    if not job:
        return ranks, []  # nothing holds together: leave the run as it was given
    return job, strays


def rank_summary(
    rt: _RankTrace, job: JobWaits | None = None, job_step_ms: float | None = None
) -> RankSummary:
    walls = [s.wall_ms for s in rt.steps]
    waits = [s.data_wait_ms for s in rt.steps if s.data_wait_ms is not None]
    p50 = median_or_none(walls)
    own = max(0.0, p50 - (rt.comm_ms_per_step or 0.0)) if p50 is not None else None
    if (
        job is not None
        and job_step_ms is not None
        and rt.rank is not None
        and rt.rank in job.wait_ms
    ):
        own = job_ranks.own_ms(job, rt.rank, len(rt.steps), job_step_ms)
    wait_p50 = median_or_none(waits)
    total = sum(walls)
    gpu = rt.summary.gpu
    comm = rt.comm_ms_per_step
    return RankSummary(
        rank=rt.rank,
        worker=rt.source.worker,
        trace=str(rt.source.trace.absolute()),
        steps=len(rt.steps),
        step_ms_p50=p50,
        data_wait_ms_p50=wait_p50,
        data_wait_frac=sum(waits) / total if waits and total > 0 else None,
        gpu_busy_frac=getattr(gpu, "busy_frac", None),
        comm_frac=comm / p50 if comm is not None and p50 else None,
        own_ms_p50=own,
        windows=rt.source.windows,
    )


def len_gpu_work(rt: _RankTrace) -> bool:
    return rt.summary.gpu is not None or bool(rt.summary.device_properties)


def _order(ranks: list[_RankTrace]) -> list[_RankTrace]:
    """Known ranks first in rank order, then the rest by worker name."""
    return sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0, r.source.worker))


def load_trace_run(run: RunInput) -> TraceRunRecord:
    """Parse every rank's trace (and the snapshot) of one run into a TraceRunRecord."""
    notes: list[str] = []
    read: list[_RankTrace] = []
    failed: list[CorruptArtifact] = []
    for source in run.ranks:
        try:
            read.append(_read_rank(source))
        except CorruptArtifact as err:
            failed.append(err)
    # A bad file beside good ones costs only itself: the good ones are reported, the bad
    # one named in a warning. Nothing usable at all is still the error.
    memory = None
    if run.snapshot is not None:
        try:
            memory = load_memory(run.snapshot)
        except CorruptArtifact as err:
            if not read:
                raise
            notes.append(f"skipped: {err}")
    if not read and failed:
        raise failed[0]
    notes.extend(f"skipped: {err}" for err in failed)
    ranks = _order(read)
    ranks, strays = one_job(ranks)
    for stray, why in strays:
        notes.append(
            f"{stray.source.trace.name} is not of this job ({why}): left out of it and "
            "diagnosed on its own"
        )
    for r in ranks:
        if r.source.older:
            notes.append(
                f"{r.source.worker}: {r.source.windows} profiler windows (trace files); "
                f"analysed the newest, {r.source.trace.name}"
            )
    ranks_known = [r.rank for r in ranks if r.rank is not None]
    if len(ranks_known) != len(set(ranks_known)):
        notes.append(
            "several traces claim the same rank (distributedInfo.rank or the file name): "
            "ranks are numbered by worker name instead"
        )
        by_worker = sorted(ranks, key=lambda r: r.source.worker)
        ranks = [replace(r, rank=i) for i, r in enumerate(by_worker)]
    job = _job(ranks)
    if job is not None:
        ranks = job_ranks.ordered_for_job(ranks, lambda r: r.rank, job.late_rank)
        world = _world(ranks)
        notes.insert(0, job_ranks.job_note(job, len(ranks[0].steps), len(ranks), world))
    job_step = median_or_none(
        [p for r in ranks if (p := median_or_none([s.wall_ms for s in r.steps])) is not None]
    )
    head = ranks[0] if ranks else None
    others = tuple(
        RankRecord(
            rank=r.rank if r.rank is not None else i,
            dir=r.source.trace.parent,
            manifest=None,
            steps=r.steps,
        )
        for i, r in enumerate(ranks[1:], start=1)
    )
    device = head.device if head else None
    if device is None and head is not None and not len_gpu_work(head):
        device = DeviceInfo(kind="cpu", name="CPU (no GPU work in the trace)")
    elif device is None and memory is not None:
        device = DeviceInfo(kind="cuda", name="CUDA device (memory snapshot)")
    vendors = Counter(r.vendor for r in ranks if r.vendor)
    iters = {r.dataloader_iter for r in ranks if r.dataloader_iter}
    directory = run.directory
    return TraceRunRecord(
        dir=directory,
        spec=None,
        manifest=None,
        observations={},
        steps=head.steps if head else (),
        samples=(),
        trace=head.summary if head else None,
        memory=memory,
        trace_files=tuple(str(r.source.trace.absolute()) for r in ranks),
        notes=tuple(notes),
        ranks=others,
        run_name=run.name,
        inputs=tuple(str(p.absolute()) for p in run.files),
        device=device,
        gpu_vendor=vendors.most_common(1)[0][0] if vendors else None,
        distributed=head.distributed if head else None,
        # "multi" wins: one rank loading in-process among worker-fed ranks is the odd one.
        dataloader_iter="multi" if "multi" in iters else ("single" if iters else None),
        rank_summaries=tuple(rank_summary(r, job, job_step) for r in ranks)
        if len(ranks) > 1
        else (),
        job=job,
        strays=tuple(s.source for s, _ in strays),
    )


def _job(ranks: list[_RankTrace]) -> JobWaits | None:
    """Who the traced ranks wait for, from their collective kernels (job_ranks.py)."""
    sequences = {
        r.rank: r.summary.comm.sequence
        for r in ranks
        if r.rank is not None and r.summary.comm is not None
    }
    if len(sequences) < 2 or len(sequences) < len(ranks):
        return None
    # Collectives are matched by order: only across traces of the same steps (each rank's
    # profiler window, by its ProfilerStep numbers, where the traces have them).
    numbered = [set(r.summary.step_numbers) for r in ranks if r.summary.step_numbers]
    if len(numbered) == len(ranks) and not set.intersection(*numbered):
        return None
    return job_ranks.job_waits(sequences)


def _world(ranks: list[_RankTrace]) -> int | None:
    sizes = [r.distributed.get("world_size") for r in ranks if r.distributed]
    known = [w for w in sizes if isinstance(w, int) and not isinstance(w, bool)]
    return max(known) if known else None
