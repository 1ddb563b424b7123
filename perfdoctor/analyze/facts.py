"""RunRecord -> Facts (flat scalars named in fact_catalog.py), and chart series for one run.

Step timing facts use the timed phase only: warm-up steps carry compilation, allocator growth
and cold caches, and profiled steps carry the profiler's own overhead. A fact is None when
what it needs was not measured (GPU facts on a CPU run, trace facts without a trace, ...).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfdoctor.analyze import job_ranks, rank_table, run_stats, straggler
from perfdoctor.analyze.attribution import merge_locations
from perfdoctor.analyze.comm_facts import comm_facts
from perfdoctor.analyze.comm_trace import CommSummary
from perfdoctor.analyze.compile_facts import compile_facts
from perfdoctor.analyze.compute_facts import compute_facts, compute_settings
from perfdoctor.analyze.cpu_precision import cpu_precision_facts
from perfdoctor.analyze.fact_bounds import within_bounds
from perfdoctor.analyze.fact_catalog import FACTS
from perfdoctor.analyze.growth import growth_fit_sampled, sustained_growth
from perfdoctor.analyze.load_window import with_run_load
from perfdoctor.analyze.loop_account import loop_facts
from perfdoctor.analyze.memory import (
    SNAPSHOT_FACTS,
    memory_peak_locations,
    snapshot_facts,
)
from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.run_stats import finite_numbers
from perfdoctor.analyze.samples import SamplesSummary
from perfdoctor.analyze.trace_gpu import GpuSummary
from perfdoctor.model import Facts, Scalar, SourceLocation, StepRecord
from perfdoctor.run_schema import (
    CpuInfo,
    CudaMemoryInfo,
    DataLoaderInfo,
    ForwardsInfo,
    Observations,
    ObservedDevice,
    SourceLine,
    TorchSettings,
    observations,
)

log = logging.getLogger(__name__)


def derive_facts(record: RunRecord) -> Facts:
    samples = _samples_summary(record)
    measured = fact_values(record, samples)
    unknown = sorted(set(measured) - set(FACTS))
    if unknown:
        # A fact name missing from the catalog is a bug (a test checks it); the run's other
        # facts are still good, so drop it rather than fail the whole report.
        log.warning("facts missing from fact_catalog.FACTS, dropped: %s", ", ".join(unknown))
    values: dict[str, Scalar] = dict.fromkeys(FACTS)
    values.update({k: _plain(v) for k, v in measured.items() if k in FACTS})
    # No share above its whole reaches a rule or a report (fact_bounds.py).
    values, withheld = within_bounds(values)
    settings = _settings(record, samples)
    if withheld:
        settings["withheld"] = list(withheld)
    return Facts(values=values, locations=_locations(record), settings=settings)


def fact_values(record: RunRecord, samples: SamplesSummary | None = None) -> dict[str, Any]:
    """Every fact the record can give, by name (only the measured ones)."""
    values: dict[str, Any] = {}
    values.update(_device_facts(record))
    values.update(_step_facts(record))
    values.update(_observation_facts(_observed(record)))
    values.update(_memory_facts(record, values.get("device_total_memory_bytes")))
    values.update(_sample_facts(samples if samples is not None else _samples_summary(record)))
    values.update(_trace_facts(record))
    values.update(_rank_facts(record))
    values.update(_rank_comm_facts(record))
    values.update(loop_facts(record))  # analyze/loop_account.py
    values.update(compile_facts(record))
    if getattr(record, "source", "run") == "trace":
        values.update(_trace_record_facts(record))
    values.update(compute_facts(record, values))  # after the step and autocast facts
    if values.get("optimizer_impl") is None and values.get("single_tensor_optimizer"):
        values["optimizer_impl"] = "single_tensor"  # the child's naming (collect/observe.py)
    return values


# --------------------------------------------------------------------------- helpers


def _plain(value: Any) -> Scalar:
    """numpy scalars -> Python scalars; NaN/inf -> None (a fact is a JSON value)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(float(value)) else None
    return value


def _observed(record: Any) -> Observations:
    """The record's typed observations (a record built without them has none)."""
    found = getattr(record, "observed", None)
    return found if isinstance(found, Observations) else Observations()


# A phase needs this many timed steps to compare its median with its fastest instance, and a
# median of at least this many ms (a sub-millisecond phase varies by more than 10x alone).
STALL_MIN_STEPS = 8
STALL_MIN_MEDIAN_MS = 1.0


def phase_stall(timed: Sequence[StepRecord]) -> dict[str, Scalar]:
    """The phase (forward, backward, optimizer) whose median timed instance is the most times
    its fastest one: the same ops on the same shapes, so a 10x spread is not the work. On a
    loaded machine two intra-op threads wait on each other whenever one is descheduled, and
    a small-op phase reads 30-200x its quiet time in some steps and not in others (a 0.9 ms
    policy-gradient update read 0.3-165 ms forwards at load 11 on 2 cores)."""
    best: tuple[float, str, float, float] | None = None
    for name, value in (
        ("forward", lambda s: s.forward_ms),
        ("backward", lambda s: s.backward_ms),
        ("optimizer", lambda s: s.optimizer_ms),
    ):
        found = [v for v in finite_numbers(value(s) for s in timed) if v > 0]
        if len(found) < STALL_MIN_STEPS:
            continue
        median = float(np.median(found))
        fastest = min(found)
        if median < STALL_MIN_MEDIAN_MS:
            continue
        ratio = median / fastest
        if best is None or ratio > best[0]:
            best = (ratio, name, median, fastest)
    if best is None:
        return {}
    ratio, name, median, fastest = best
    return {
        "phase_stall_ratio": ratio,
        "phase_stall_phase": name,
        "phase_stall_median_ms": median,
        "phase_stall_fastest_ms": fastest,
    }


def _training_loader_index(obs: Observations) -> int | None:
    """Index of the DataLoader that fed batches in the most steps, then the most batches;
    the first of those. Steps first: an evaluation loop can feed more batches than the
    training loader inside a single step (minGPT's adder evaluates the whole training set
    at iteration 0: 95 batches in one step against one per step)."""
    loaders = obs.dataloaders or []
    if not loaders:
        return None
    return max(
        range(len(loaders)),
        key=lambda i: (loaders[i].steps_fed or 0, loaders[i].batches or 0),
    )


def _training_dataloader(obs: Observations) -> DataLoaderInfo | None:
    index = _training_loader_index(obs)
    return None if index is None else (obs.dataloaders or [])[index]


def _location(data: SourceLine | None, call: str | None = None) -> SourceLocation | None:
    if data is None or not data.file:
        return None
    return SourceLocation(
        file=data.file,
        line=data.line if data.line is not None else 0,
        function=data.function or "",
        count=data.count,
        call=call or None,
    )


# --------------------------------------------------------------------------- device / run


def _device_facts(record: RunRecord) -> dict[str, Scalar]:
    obs = _observed(record)
    device = record.manifest.device if record.manifest else None
    obs_dev = obs.device or ObservedDevice()
    props = record.trace.device_properties if record.trace else ()
    kind = device.kind if device else obs_dev.kind
    cc: Any = device.compute_capability if device else obs_dev.compute_capability
    if cc is None and props:
        major, minor = props[0].get("computeMajor"), props[0].get("computeMinor")
        if isinstance(major, int):
            cc = f"{major}.{minor if isinstance(minor, int) else 0}"
    try:
        capability = float(cc) if cc is not None else None
    except (TypeError, ValueError):
        capability = None
    total = device.total_memory_bytes if device else None
    total = total or obs_dev.total_memory_bytes or (obs.cuda_memory or CudaMemoryInfo()).total_bytes
    if total is None and props and isinstance(props[0].get("totalGlobalMem"), int):
        total = props[0]["totalGlobalMem"]
    cpu = obs.cpu or CpuInfo()
    detection = record.manifest.step_detection if record.manifest else None
    return {
        "device_is_cuda": None if kind is None else kind == "cuda",
        "device_count": (device.count if device else obs_dev.count),
        "gpu_compute_capability": capability,
        "device_total_memory_bytes": total,
        "cpu_cores_logical": cpu.logical_cores or (device.cpu_cores_logical if device else None),
        "cpu_cores_physical": cpu.physical_cores or (device.cpu_cores_physical if device else None),
        **cpu_precision_facts(cpu.low_precision_flags),
        "step_detection": detection or obs.step_detection,
    }


# --------------------------------------------------------------------------- steps


def _share(phases: Mapping[str, float], name: str, step_ms: float) -> float | None:
    value = phases.get(name)
    return value / step_ms if value is not None and step_ms > 0 else None


def batch_size(record: RunRecord) -> int | None:
    """Samples a timed step trains on when a step does not say: the median batch size of the
    timed steps, else the training DataLoader's."""
    sizes = [s.batch_size for s in record.timed_steps if s.batch_size]
    if sizes:
        return int(np.median(sizes))
    loader = _training_dataloader(_observed(record))
    size = loader.batch_size if loader else None
    return size if size is not None and size > 0 else None


def _step_facts(record: RunRecord) -> dict[str, Scalar]:
    timed = record.timed_steps
    out: dict[str, Scalar] = {"steps_timed": len(timed)}
    # A perfdoctor run's ranks step in lockstep under its hooks: the job's step is the
    # slowest rank's. Traces of a job are each rank's own ProfilerStep spans, and the report
    # diagnoses one rank's trace (its GPU window, data wait, breakdown): its step is that
    # rank's own, or the report would give the step as 19.9 ms (another rank's) beside the
    # 12.5 ms window and a data share of each (the 8-rank DLRM job). The ranks table keeps
    # every rank's own step.
    lockstep = [] if getattr(record, "source", None) == "trace" else record.ranks
    walls = run_stats.timed_step_ms(record.steps, [r.steps for r in lockstep])
    # A NaN/inf loss is written as null with loss_finite=false (JSON has no NaN).
    captured = [s for s in record.steps if s.loss is not None or s.loss_finite is False]
    out["loss_is_finite"] = (
        all(
            s.loss_finite is not False and (s.loss is None or math.isfinite(s.loss))
            for s in captured
        )
        if captured
        else None
    )
    if not walls:
        return out
    p50 = float(statistics.median(walls))
    p90 = run_stats.percentile(walls, 90)
    out.update(
        step_ms_p50=p50,
        step_ms_p90=p90,
        step_ms_mean=float(np.mean(walls)),
        step_jitter_ratio=p90 / p50 if p50 > 0 else None,
    )
    waits = finite_numbers(s.data_wait_ms for s in timed)
    out["data_wait_ms_p50"] = float(np.median(waits)) if waits else None
    # Shares of the median step, from the per-phase medians (the breakdown): one slow step
    # (an epoch boundary's first batch, an evaluation) does not make a whole run input-bound.
    phases = run_stats.phase_medians(timed)
    fracs = {
        "data_wait_frac": _share(phases, "data", p50),
        "forward_frac": _share(phases, "forward", p50),
        "backward_frac": _share(phases, "backward", p50),
        "optimizer_frac": _share(phases, "optimizer", p50),
    }
    out.update(fracs)
    parts = list(fracs.values())
    out["other_frac"] = max(0.0, 1.0 - sum(parts)) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    out["micro_batches_per_step"] = float(np.mean([s.micro_batches for s in timed]))
    batch = batch_size(record)
    out["batch_size"] = batch
    out["throughput_samples_s"] = run_stats.throughput_samples_s(
        walls, run_stats.samples_per_step(timed, batch)
    )
    out.update(phase_stall(timed))
    rss = [(float(s.index), float(s.rss_bytes)) for s in timed if s.rss_bytes is not None]
    out["rss_growth_bytes_per_step"], out["rss_growth_over_noise"] = sustained_growth(rss)
    out["rss_bytes_max"] = int(max(y for _, y in rss)) if rss else None
    cuda = [
        (float(s.index), float(s.cuda_allocated_bytes))
        for s in timed
        if s.cuda_allocated_bytes is not None
    ]
    (
        out["cuda_allocated_growth_bytes_per_step"],
        out["cuda_allocated_growth_over_noise"],
    ) = sustained_growth(cuda)
    out["memory_growth_fit_sampled"] = growth_fit_sampled(max(len(rss), len(cuda)))
    return out


# --------------------------------------------------------------------------- ranks


def _median_of(steps: Sequence[StepRecord], value: Any) -> float | None:
    found = finite_numbers(value(s) for s in steps)
    return float(np.median(found)) if found else None


def _code_ms(s: StepRecord) -> float:
    """A step's host time outside data, forward and backward: optimizer, the script's code."""
    return max(0.0, straggler.outside_forward_backward_ms(s) - (s.data_wait_ms or 0.0))


def _rank_timing(steps: Sequence[StepRecord], with_comm: bool) -> dict[str, float | None]:
    """Medians over one rank's timed steps; `own` is its own work (analyze/straggler.py)."""
    return {
        "step": _median_of(steps, lambda s: s.step_ms),
        "own": straggler.own_work_ms_p50(steps, with_comm),
        "code": _median_of(steps, _code_ms),
        "data_wait": _median_of(steps, lambda s: s.data_wait_ms),
        "forward": _median_of(steps, lambda s: s.forward_ms),
        "backward": _median_of(steps, lambda s: s.backward_ms),
    }


def _rank_nodes(record: RunRecord) -> dict[int, int]:
    """rank -> node rank, from each process's record (collect/process_tree.py), where known."""

    def node(obs: Observations) -> int | None:
        return obs.process.node_rank if obs.process is not None else None

    found = {0: node(_observed(record))}
    found.update({r.rank: node(_observed(r)) for r in record.ranks})
    return {rank: n for rank, n in found.items() if n is not None}


def _peer_wait_ms(
    lead: Sequence[StepRecord], others: Sequence[Sequence[StepRecord]]
) -> float | None:
    """Median wait per step of the traced rank (rank 0) for the slowest rank, inside the
    collectives. The ranks meet in the all-reduce every step, so the rank that did the least
    own work (outside forward and backward) before it arrives waits there for the one that
    did the most: per step, the largest own time over the ranks less rank 0's own. The
    collective's host time holds this wait plus the transfer itself; a rank slower in its
    forward or backward compute is not seen here (its wait hides in the same phases)."""
    own = straggler.outside_forward_backward_ms
    own_by_rank = [{s.index: own(s) for s in steps} for steps in others]
    waits = []
    for s in lead:
        peers = [by_index[s.index] for by_index in own_by_rank if s.index in by_index]
        if peers:
            waits.append(max(0.0, max(peers) - own(s)))
    return float(np.median(waits)) if waits else None


def _recorded_comm_ms(s: StepRecord) -> float | None:
    # steps.jsonl `comm_ms` (a collective in flight, timed live) where the run recorded it;
    # runs recorded before that field have none, and the own-time skew stands in.
    value = getattr(s, "comm_ms", None)
    return float(value) if isinstance(value, (int, float)) else None


def _recorded_comm_split(
    lead: Sequence[StepRecord], others: Sequence[Sequence[StepRecord]]
) -> tuple[float, float] | None:
    """(rank 0's wait, the transfer), medians over steps in ms, from every rank's recorded
    collective time: in a step, the rank that arrives last waits for nobody, so the least
    time any rank spent in the collectives is the transfer, and rank 0's time beyond it is
    waiting for a slower peer."""
    by_rank = [
        {s.index: c for s in steps if (c := _recorded_comm_ms(s)) is not None} for steps in others
    ]
    waits: list[float] = []
    transfers: list[float] = []
    for s in lead:
        own = _recorded_comm_ms(s)
        peers = [comm[s.index] for comm in by_rank if s.index in comm]
        if own is None or not peers:
            continue
        least = min(own, *peers)
        transfers.append(least)
        waits.append(own - least)
    if not waits:
        return None
    return float(np.median(waits)), float(np.median(transfers))


def _comm_wait_facts(record: RunRecord) -> dict[str, Scalar]:
    """Rank 0's collective time split into waiting for a slower peer and the transfer.

    Where every rank recorded its collective time per step (steps.jsonl comm_ms), from
    those (_recorded_comm_split). Otherwise: the trace's host time in collectives (its
    profiled steps) less the wait the timed steps' own-time skew measures (a sleep or a
    slow data path lasts as long with or without the profiler).

    Under DDP the transfer is also bounded by the timed steps: the all-reduce runs inside
    backward, and the rank that arrives last waits for nobody there, so the smallest
    backward over the ranks holds its compute and the whole transfer. The same bytes move
    every step, so the least-disturbed step tells the transfer's cost best (a busy machine
    only adds to it: a rank descheduled in its backward makes the others wait too): the
    smallest over the timed steps. The bound matters because the profiled steps of a
    multi-rank run inflate the collectives (each rank's profiler starts and stops on its
    own and the others wait for it): on ddp_train.py with rank 1 sleeping 20 ms per step,
    rank 1's backward was 1-2 ms timed and 25-30 ms profiled, and rank 0's traced
    collective time less the 20 ms wait still left 36% of the step against the 3-6% the
    timed backward allows."""
    timed = record.timed_steps
    others = [r.timed_steps for r in record.ranks]
    recorded = _recorded_comm_split(timed, others)
    timed_step = _median_of(timed, lambda s: s.step_ms)
    if recorded is not None and timed_step:
        wait_ms, transfer_ms = recorded
        return {
            "comm_peer_wait_ms_p50": wait_ms,
            "comm_peer_wait_frac": min(1.0, wait_ms / timed_step),
            "comm_transfer_frac": min(1.0, transfer_ms / timed_step),
        }
    wait = _peer_wait_ms(timed, others)
    if wait is None:
        return {}
    out: dict[str, Scalar] = {"comm_peer_wait_ms_p50": wait}
    trace = record.trace
    step = trace.step_ms_p50 if trace is not None else None
    if trace is None or not step or trace.comm_frac is None:
        return out
    comm_ms = trace.comm_frac * step
    transfer = max(0.0, comm_ms - wait) / step
    ddp = any(r.ddp is True for r in _observed(record).roots or ())
    known = [s.backward_ms for steps in (timed, *others) for s in steps]
    backwards = [b for b in known if b is not None]
    if ddp and backwards and timed_step:
        transfer = min(transfer, min(backwards) / timed_step)
    out["comm_peer_wait_frac"] = min(comm_ms, wait) / step
    out["comm_transfer_frac"] = transfer
    return out


def _rank_facts(record: RunRecord) -> dict[str, Scalar]:
    """Multi-rank facts (fact_catalog's "multi-rank runs"): who the others wait for."""
    out: dict[str, Scalar] = {"ranks_launched": record.ranks_launched}
    with_comm = straggler.comm_recorded(
        [record.timed_steps, *(r.timed_steps for r in record.ranks)]
    )
    per_rank = {0: _rank_timing(record.timed_steps, with_comm)}
    per_rank.update({r.rank: _rank_timing(r.timed_steps, with_comm) for r in record.ranks})
    timed = {k: v for k, v in per_rank.items() if v["step"] is not None and v["own"] is not None}
    picked = straggler.straggler_and_fastest((k, timed[k]["own"]) for k in sorted(timed))
    if picked is None:
        return out
    out.update(_comm_wait_facts(record))
    steps = [v["step"] for v in timed.values() if v["step"] is not None]
    slowest, fastest = picked
    others = [v["own"] for k, v in timed.items() if k != slowest and v["own"] is not None]
    slow, fast = timed[slowest], timed[fastest]
    nodes = _rank_nodes(record)
    if len(set(nodes.values())) > 1 and slowest in nodes:
        out["straggler_node_rank"] = nodes[slowest]
    excess = max(0.0, (slow["own"] or 0.0) - float(np.median(others)))
    typical = float(np.median(steps))
    out.update(
        rank_step_ms_p50_spread_frac=(max(steps) - min(steps)) / min(steps)
        if min(steps) > 0
        else None,
        straggler_rank=slowest,
        fastest_rank=fastest,
        straggler_own_basis="step_less_comm" if with_comm else "outside_forward_backward",
        straggler_own_ms_p50=slow["own"],
        fastest_rank_own_ms_p50=fast["own"],
        straggler_code_ms_p50=slow["code"],
        fastest_rank_code_ms_p50=fast["code"],
        straggler_excess_ms=excess,
        straggler_excess_frac=excess / typical if typical > 0 else None,
        rank_timed_steps_min=min(
            len(steps) for steps in (record.timed_steps, *(r.timed_steps for r in record.ranks))
        ),
        straggler_data_wait_ms_p50=slow["data_wait"],
        fastest_rank_data_wait_ms_p50=fast["data_wait"],
        straggler_forward_ms_p50=slow["forward"],
        fastest_rank_forward_ms_p50=fast["forward"],
        straggler_backward_ms_p50=slow["backward"],
        fastest_rank_backward_ms_p50=fast["backward"],
    )
    return out


def _rank_comm_facts(record: RunRecord) -> dict[str, Scalar]:
    """Each training process's share of its step with a collective in flight (steps.jsonl
    comm_ms): the lead's, and the largest and smallest over the processes."""
    if getattr(record, "source", "run") == "trace":
        return {}
    shares = rank_table.comm_fracs(record)
    if not shares:
        return {}
    most = max(shares, key=lambda k: (shares[k], -k))
    return {
        "comm_step_frac": shares.get(0),
        "rank_comm_frac_max": shares[most],
        "rank_comm_frac_max_rank": most,
        "rank_comm_frac_min": min(shares.values()),
    }


# --------------------------------------------------------------------------- trace-only runs


def _trace_record_facts(record: Any) -> dict[str, Scalar]:
    """Facts of a run seen only through its traces (analyze/trace_record.TraceRunRecord).

    They replace what a perfdoctor run reads from its manifest and observations: the device
    from deviceProperties and the kernels, the process group from distributedInfo, the
    DataLoader's worker mode from its iterator class, and the rank facts from each rank's
    step time less its communication (every other rank waits in the collectives for the
    slowest, so the step time alone is the same on all ranks).
    """
    device = getattr(record, "device", None)
    trace = record.trace
    props = trace.device_properties if trace is not None else ()
    has_gpu_rows = trace is not None and trace.gpu is not None
    if device is not None:
        is_cuda: bool | None = device.kind == "cuda"
    elif trace is None and record.memory is not None:
        is_cuda = True  # a CUDA memory snapshot alone
    elif trace is not None:
        # Launch calls alone make it a CUDA run too: a trace whose GPU side was lost.
        is_cuda = bool(
            has_gpu_rows or props or trace.timeline_facts.get("trace_kernel_launch_count")
        )
    else:
        is_cuda = None
    cc = device.compute_capability if device is not None else None
    on_gpu = device is not None and device.kind == "cuda"
    dist = getattr(record, "distributed", None) or {}
    world = dist.get("world_size")
    backend = dist.get("backend")
    mode = getattr(record, "dataloader_iter", None)
    summaries = getattr(record, "rank_summaries", ())
    out: dict[str, Scalar] = {
        "device_is_cuda": is_cuda,
        "device_count": len(props) if props else (1 if on_gpu else None),
        "gpu_compute_capability": float(cc) if cc else None,
        "device_total_memory_bytes": device.total_memory_bytes if device and on_gpu else None,
        "gpu_name": device.name if device and on_gpu and props else None,
        "gpu_vendor": getattr(record, "gpu_vendor", None),
        "step_detection": "profiler_step" if record.timed_steps else None,
        "step_timing_source": "profiled_steps" if record.timed_steps else None,
        # One backward per step is what a perfdoctor run counts; a trace does not say.
        "micro_batches_per_step": None,
        "world_size": world if isinstance(world, int) and not isinstance(world, bool) else None,
        "dist_backend": str(backend) if backend else None,
        "dataloader_multiprocess": {"multi": True, "single": False}.get(mode or ""),
        "dataloader_num_workers": 0 if mode == "single" else None,
        "ranks_launched": 1 + len(record.ranks),
    }
    if record.memory is not None and out["device_total_memory_bytes"]:
        peak = record.memory.peak_allocated_bytes
        if isinstance(peak, int):
            out["peak_allocated_frac"] = peak / int(out["device_total_memory_bytes"])  # type: ignore[arg-type]
    if len(summaries) > 1:
        out.update(_trace_rank_facts(summaries))
        job = getattr(record, "job", None)
        world = out["world_size"] if isinstance(out["world_size"], int) else None
        out.update(job_ranks.job_facts(job, len(record.timed_steps), len(summaries), world))
    return out


def _trace_rank_facts(summaries: Sequence[Any]) -> dict[str, Scalar]:
    """The straggler among traced ranks: the largest own time (step less communication)."""
    timed = {
        (s.rank if s.rank is not None else i): s
        for i, s in enumerate(summaries)
        if s.step_ms_p50 is not None and s.own_ms_p50 is not None
    }
    if len(timed) < 2:
        return {}
    steps = [s.step_ms_p50 for s in timed.values()]
    picked = straggler.straggler_and_fastest((k, timed[k].own_ms_p50) for k in sorted(timed))
    if picked is None:
        return {}
    slowest, fastest = picked
    others = [s.own_ms_p50 for k, s in timed.items() if k != slowest]
    slow, fast = timed[slowest], timed[fastest]
    excess = max(0.0, slow.own_ms_p50 - float(np.median(others)))
    typical = float(np.median(steps))
    return {
        "rank_step_ms_p50_spread_frac": (max(steps) - min(steps)) / min(steps)
        if min(steps) > 0
        else None,
        "straggler_rank": slowest,
        "fastest_rank": fastest,
        "straggler_own_basis": "step_less_comm",
        "straggler_own_ms_p50": slow.own_ms_p50,
        "fastest_rank_own_ms_p50": fast.own_ms_p50,
        "straggler_excess_ms": excess,
        "straggler_excess_frac": excess / typical if typical > 0 else None,
        "straggler_data_wait_ms_p50": slow.data_wait_ms_p50,
        "fastest_rank_data_wait_ms_p50": fast.data_wait_ms_p50,
        "straggler_forward_ms_p50": None,
        "fastest_rank_forward_ms_p50": None,
        "straggler_backward_ms_p50": None,
        "fastest_rank_backward_ms_p50": None,
    }


# --------------------------------------------------------------------------- observations


def _observation_facts(obs: Observations) -> dict[str, Scalar]:
    loaders = obs.dataloaders or []
    loader = _training_dataloader(obs) or DataLoaderInfo()
    optimizers = obs.optimizers or []
    opt = optimizers[0] if optimizers else None
    roots = obs.roots or []
    torch = obs.torch or TorchSettings()
    forwards = obs.forwards or ForwardsInfo()
    profiler, autocast, dist = obs.profiler, obs.autocast, obs.dist
    root_calls = forwards.root_calls
    without_bwd = forwards.grad_without_backward

    def any_root(flags: list[bool | None]) -> bool | None:
        known = [f for f in flags if f is not None]
        return any(known) if known else None

    def sum_roots(counts: list[int | None]) -> int | None:
        known = [c for c in counts if c is not None]
        return sum(known) if known else None

    conv_roots = [r for r in roots if (r.conv_count or 0) > 0]
    channels_last = [r.channels_last for r in conv_roots or roots]
    return {
        "dataloader_count": len(loaders) if obs.dataloaders is not None else None,
        "dataloader_num_workers": loader.num_workers,
        "dataloader_pin_memory": loader.pin_memory,
        "dataloader_prefetch_factor": loader.prefetch_factor,
        "dataloader_persistent_workers": loader.persistent_workers,
        "dataloader_is_iterable": loader.iterable,
        "dataloader_dataset_class": loader.dataset_class,
        "dataloader_sampler_class": loader.sampler_class,
        "dataloader_batch_size": loader.batch_size,
        "torch_num_threads": torch.num_threads,
        "anomaly_detection_enabled": torch.anomaly_enabled,
        "user_profiler_active": profiler.user_profiler if profiler else None,
        "emit_nvtx_enabled": profiler.emit_nvtx if profiler else None,
        "grad_forwards_without_backward": without_bwd,
        "grad_forwards_without_backward_frac": without_bwd / root_calls
        if without_bwd is not None and root_calls
        else None,
        "cudnn_benchmark": torch.cudnn_benchmark,
        "cudnn_deterministic": torch.cudnn_deterministic,
        "deterministic_algorithms": torch.deterministic_algorithms,
        "tf32_matmul_enabled": torch.tf32_matmul,
        "autocast_used": autocast.used if autocast else None,
        "autocast_dtype": autocast.dtype if autocast else None,
        "autocast_device_type": autocast.device_type if autocast else None,
        "grad_scaler_used": autocast.grad_scaler if autocast else None,
        "optimizer_class": opt.class_name if opt else None,
        "optimizer_count": len(optimizers) if obs.optimizers is not None else None,
        "optimizer_impl": opt.impl if opt else None,
        "optimizer_param_tensors": opt.param_tensors if opt else None,
        "zero_grad_set_to_none": obs.zero_grad.set_to_none if obs.zero_grad else None,
        # Trainable parameters where the child counted them, else all of them.
        "model_param_count": sum_roots(
            [
                r.trainable_param_count if r.trainable_param_count is not None else r.param_count
                for r in roots
            ]
        ),
        "model_conv_count": sum_roots([r.conv_count for r in roots]),
        "model_channels_last": all(channels_last)
        if channels_last and all(c is not None for c in channels_last)
        else None,
        "model_compiled": any_root([r.compiled for r in roots]),
        "conv_bias_before_bn_count": sum_roots([r.conv_bias_before_bn for r in roots]),
        "uses_data_parallel": any_root([r.data_parallel for r in roots]),
        "uses_ddp": any_root([r.ddp for r in roots]),
        "dist_backend": dist.backend if dist else None,
        "world_size": dist.world_size if dist else None,
        "recompile_count": obs.compile.recompiles if obs.compile else None,
        "input_shape_changes": obs.inputs.distinct_shapes_after_warmup if obs.inputs else None,
    }


# --------------------------------------------------------------------------- memory


def _memory_facts(record: RunRecord, device_total: Any) -> dict[str, Scalar]:
    mem = record.memory
    obs = _observed(record)
    obs_mem = obs.cuda_memory or CudaMemoryInfo()
    step_peak = run_stats.step_cuda_peak(record.steps)
    total = device_total if isinstance(device_total, int) else None
    out: dict[str, Scalar] = dict.fromkeys(SNAPSHOT_FACTS)
    if mem is not None:
        out.update(snapshot_facts(mem, total))
    # The snapshot covers the profiled window only; the child's max_memory_allocated covers
    # the whole run, so the larger of the two is the peak.
    peak = run_stats.cuda_peak_bytes(
        out["peak_allocated_bytes"], obs_mem.max_allocated_bytes, step_peak
    )
    reserved = run_stats.cuda_peak_bytes(out["peak_reserved_bytes"], obs_mem.max_reserved_bytes)
    # torch.cuda.memory_stats() over the whole run, as the child read it at the end.
    stat_retries = _first_known(obs_mem.alloc_retries, obs_mem.num_alloc_retries)
    stat_ooms = _first_known(obs_mem.ooms, obs_mem.num_ooms)
    retries = mem.alloc_retries if mem and mem.alloc_retries is not None else stat_retries
    ooms = mem.oom_events if mem else None
    if stat_ooms is not None:
        ooms = max(ooms or 0, stat_ooms)
    history = obs.memory_history
    truncated = mem.history_truncated if mem else None
    if history is not None and history.truncated is not None:
        truncated = bool(truncated) or history.truncated
    out.update(
        {
            "peak_allocated_bytes": peak,
            "peak_reserved_bytes": reserved,
            "peak_allocated_frac": peak / total if peak is not None and total else None,
            "alloc_retries": retries,
            "oom_events": ooms,
            "memory_history_truncated": truncated,
            "caching_allocator_disabled": obs_mem.caching_disabled,
            "device_alloc_count": obs_mem.device_allocs,
        }
    )
    return out


def _first_known(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


# --------------------------------------------------------------------------- samples


def _samples_summary(record: RunRecord) -> SamplesSummary | None:
    if not record.samples:
        return None
    summary = run_stats.timed_samples_summary(
        record.samples, record.progress, len(record.timed_steps)
    )
    return with_run_load(summary, record.samples)  # a window between two sampler ticks


def _sample_facts(s: SamplesSummary | None) -> dict[str, Scalar]:
    if s is None:
        return {}
    return {
        "gpu_util_mean_frac": s.gpu_util_mean_frac,
        "gpu_power_w_mean": s.gpu_power_w_mean,
        "energy_j_per_step": s.energy_j_per_step,
        "gpu_throttled_frac": s.gpu_throttled_frac,
        "sm_active_frac": s.sm_active_frac,
        "tensor_active_frac": s.tensor_active_frac,
        "cpu_util_mean_frac": s.cpu_util_mean_frac,
        "cpu_busy_cores": s.cpu_busy_cores,
        "child_cpu_busy_cores": s.child_cpu_cores,
        "cpu_other_busy_cores": s.other_busy_cores,
    }


# --------------------------------------------------------------------------- trace


def _trace_facts(record: RunRecord) -> dict[str, Scalar]:
    t = record.trace
    if t is None:
        return {}
    out: dict[str, Scalar] = {
        "trace_steps": t.steps,
        "trace_step_ms_p50": t.step_ms_p50,
        "host_syncs_per_step": t.host_syncs_per_step,
        "host_sync_ms_per_step": t.host_sync_ms_per_step,
        "cpu_op_count_per_step": t.aten_ops_per_step,
        "single_tensor_optimizer": t.single_tensor_optimizer,
        "zero_grad_zeroing": t.zero_grad_zeroing,
        "tensor_to_device_per_step": t.tensor_to_device_per_step,
        "conv_ms_frac": t.conv_frac,
        "matmul_ms_frac": t.matmul_frac,
        "fp32_matmul_conv_frac": t.fp32_matmul_conv_frac,
        "misaligned_lowp_gemm_count": t.misaligned_lowp_gemm_count,
        "trace_python_frames": t.python_frames,
        "misaligned_gemm_dims": (
            ", ".join(str(d) for d in t.misaligned_gemm_dims) if t.misaligned_gemm_dims else None
        ),
        "embedding_rows": t.embedding_rows,
        "dataloader_trace_ms_per_step": t.dataloader_ms_per_step,
        "comm_frac": t.comm_frac,
    }
    g = t.gpu
    if g is None:
        return {**out, **t.timeline_facts}
    per_step_known = t.steps > 0
    out.update(
        {
            "gpu_busy_frac": g.busy_frac,
            "gpu_idle_host_wait_frac": g.idle_host_wait_frac,
            "gpu_idle_host_data_frac": g.idle_host_data_frac,
            "gpu_idle_host_sync_frac": g.idle_host_sync_frac,
            "gpu_idle_host_busy_frac": g.idle_host_busy_frac,
            "gpu_idle_host_unrecorded_frac": g.idle_host_unrecorded_frac,
            "gpu_idle_launch_gap_frac": g.idle_launch_gap_frac,
            "gpu_idle_dependency_wait_frac": g.idle_dependency_wait_frac,
            "gpu_compute_frac": g.compute_frac,
            "gpu_comm_frac": g.comm_frac,
            "gpu_comm_exposed_frac": g.comm_exposed_frac,
            "gpu_comm_overlap_frac": g.comm_overlap_frac,
            "gpu_tail_ms": g.gpu_tail_ms,
            "gpu_window_ms": g.window_us / 1000.0,
            "gpu_window_launch_count": g.kernel_count + g.memcpy_count,
            "launch_call_us_mean": g.launch_call_us_mean,
            "launch_ops_host_frac": g.launch_ops_host_frac,
            "kernels_per_step": g.kernels_per_step,
            "kernel_launches_per_step": g.kernel_launches_per_step,
            "kernel_us_p50": g.kernel_us_p50,
            "memcpy_htod_ms_per_step": g.memcpy_ms_per_step.get("HtoD", 0.0)
            if per_step_known
            else None,
            "memcpy_dtoh_ms_per_step": g.memcpy_ms_per_step.get("DtoH", 0.0)
            if per_step_known
            else None,
            "memcpy_dtod_ms_per_step": g.memcpy_ms_per_step.get("DtoD", 0.0)
            if per_step_known
            else None,
            "pageable_htod_count_per_step": g.pageable_htod_count_per_step,
            "pageable_htod_frac": g.pageable_htod_frac,
            "tensor_core_kernel_frac": g.tensor_core_kernel_frac,
            "triton_kernel_count_per_step": g.triton_kernels_per_step,
            "comm_kernel_frac": g.comm_kernel_frac,
        }
    )
    out.update(t.timeline_facts)  # after the GPU facts: it refines gpu_idle_host_busy_frac
    out.update(comm_facts(t.comm, g.comm_exposed_frac))
    return out


# --------------------------------------------------------------------------- evidence


def _locations(record: RunRecord) -> dict[str, tuple[SourceLocation, ...]]:
    """Source lines by topic (fact_catalog.LOCATION_TOPICS), biggest share first."""
    obs = _observed(record)
    out: dict[str, tuple[SourceLocation, ...]] = {}
    if record.trace is not None:
        out.update(record.trace.locations)
    grad = [_location(x) for x in (obs.forwards.locations if obs.forwards else None) or []]
    loaders = [_location(d.location) for d in obs.dataloaders or []]
    opts = [_location(o.location) for o in obs.optimizers or []]
    found: list[tuple[str, list[SourceLocation | None]]] = [
        ("grad_without_backward", grad),
        ("dataloader_construct", loaders),
        ("optimizer_construct", opts),
    ]
    # Any other topic the child located itself (debug_mode, conv_bias_before_bn, ...).
    for topic, lines in (obs.locations or {}).items():
        found.append((topic, [_location(x) for x in lines]))
    for topic, locs in found:
        kept = tuple(x for x in locs if x is not None)
        if kept:
            out[topic] = merge_locations(out.get(topic, ()), kept, top=10)
    # Host syncs the child saw at the call: exact lines, so they go before the trace's
    # function-level ones.
    sites = obs.host_sync_calls.sites if obs.host_sync_calls else None
    exact = tuple(
        loc for loc in (_location(site, call=site.call) for site in sites or []) if loc is not None
    )
    if exact:
        # A trace location in a function that has exact lines only repeats it less precisely.
        # (Compared by file name: the trace and the child may spell the path differently.)
        functions = {(os.path.basename(loc.file), loc.function) for loc in exact}
        traced = tuple(
            loc
            for loc in out.get("host_sync", ())
            if (os.path.basename(loc.file), loc.function) not in functions
        )
        out["host_sync"] = merge_locations(exact, traced, top=10)
    if record.memory is not None and record.memory.top_sites:
        out["memory_peak"] = memory_peak_locations(record.memory)
    return out


def profiler_window_missed(obs: Observations | Mapping[str, Any]) -> str | None:
    """Why a run that asked for a profiler trace has none, when the script simply ended
    before the profiled steps (the plan puts them after the warm-up and timed steps).
    `obs`: RunRecord.observed, or observations.json as decoded JSON."""
    if not isinstance(obs, Observations):
        obs = observations(obs)
    profiler, plan = obs.profiler, obs.plan
    if profiler is None or plan is None:
        return None
    if not profiler.requested or profiler.started or profiler.user_profiler:
        return None
    seen, profiled = obs.steps_seen, plan.profiled_steps
    parts = [plan.warmup_steps, plan.timed_steps, plan.profiler_warmup_steps]
    if seen is None or not profiled or not all(p is not None for p in parts):
        return None
    start = sum(parts)  # type: ignore[arg-type]
    if seen > start:
        return None
    return (
        f"no profiler trace: the script ended after {seen} steps, before the profiler window "
        f"(steps {start + 1}-{start + profiled} of the plan); run more iterations, or fewer "
        "--warmup/--steps"
    )


def _settings(record: RunRecord, samples: SamplesSummary | None) -> dict[str, Any]:
    # The settings sections are shown as the child wrote them (every key, nulls included),
    # so they come from the raw observations; which loader trained comes from the typed ones.
    raw = record.observations
    obs = _observed(record)
    warnings: list[str] = list(obs.warnings or [])
    if record.manifest:
        warnings.extend(record.manifest.warnings)
    warnings.extend(record.notes)
    if samples is not None:
        warnings.extend(samples.notes)
    loader = _training_loader_index(obs)
    settings: dict[str, Any] = {
        "dataloader": raw["dataloaders"][loader] if loader is not None else None,
        "dataloaders": list(raw.get("dataloaders") or []),
        "optimizer": (raw.get("optimizers") or [None])[0],
        "optimizers": list(raw.get("optimizers") or []),
        "roots": list(raw.get("roots") or []),
        "torch": raw.get("torch"),
        "cpu": raw.get("cpu"),
        "autocast": raw.get("autocast"),
        "applied": list(raw.get("applied") or []),
    }
    if record.trace is not None:
        t = record.trace
        warnings.extend(t.notes)
        settings["trace"] = {
            "file": t.path,
            "op_share_basis": t.op_share_basis,
            "has_stacks": t.has_stacks,
            "has_shapes": t.has_shapes,
            "memcpy_ms_per_step": dict(t.gpu.memcpy_ms_per_step) if t.gpu else {},
        }
        if t.gpu is not None:
            settings["trace"]["gpu"] = _gpu_settings(t.gpu)
            if t.comm is not None and t.comm.kinds:
                settings["trace"]["gpu"]["collectives"] = collective_rows(t.comm)
    if record.memory is not None:
        warnings.extend(record.memory.notes)
        settings["memory"] = {
            "categories_at_peak_bytes": dict(record.memory.categories_at_peak),
            "reserved_at_peak_bytes": record.memory.reserved_at_peak_bytes,
            "history_entries": record.memory.history_entries,
            "top_sites_bytes": [s.bytes for s in record.memory.top_sites],
        }
    settings["compute"] = compute_settings(record)
    settings["warnings"] = list(dict.fromkeys(warnings))
    return settings


def gpu_timeline(facts: Facts) -> dict[str, Any]:
    """Report.gpu: the GPU window, counts and top kernels beyond the flat facts ({} without
    GPU activity in the trace)."""
    trace = facts.settings.get("trace")
    gpu = trace.get("gpu") if isinstance(trace, dict) else None
    return dict(gpu) if isinstance(gpu, dict) else {}


def collective_rows(comm: CommSummary) -> list[dict[str, Any]]:
    """Report.gpu["collectives"]: one row per collective type, most time first, with its
    message size and bus bandwidth where the trace records sizes, and whether its time is
    transfer or waiting for a peer (analyze/comm_wait.py)."""
    rows = []
    for k in comm.kinds:
        w = k.wait
        rows.append(
            {
                "kind": k.kind,
                "count": k.count,
                "ms_total": k.total_us / 1000.0,
                "share": k.share,
                "sized": k.sized,
                "bytes_mean": k.bytes_total / k.sized if k.bytes_total and k.sized else None,
                "busbw_gbs_p50": w.busbw_gbs_p50,
                "busbw_gbs_max": w.busbw_gbs_max,
                "link_frac": w.link_frac,
                "verdict": w.verdict,
                "reason": w.reason,
                "link": comm.link.name if comm.link else None,
                "link_gbs": comm.link.gbs if comm.link else None,
            }
        )
    return rows


def _gpu_settings(g: GpuSummary) -> dict[str, Any]:
    """What the GPU section of the reports shows beyond the facts: the window, the counts,
    and the kernels that take the time."""
    return {
        "device": g.device,
        "window_ms": g.window_us / 1000.0,
        "window_basis": g.window_basis,
        "streams": g.streams,
        "kernel_count": g.kernel_count,
        "launch_count": g.launch_count,
        "memcpy_count": g.memcpy_count,
        "memset_count": g.memset_count,
        "unlaunched_count": g.unlaunched_count,
        "memcpy_count_by_kind": dict(g.memcpy_count_by_kind),
        "top_kernels": [
            {
                "name": k.name,
                "count": k.count,
                "ms_total": k.us_total / 1000.0,
                "share": k.share,
                "comm": k.comm,
                "tensor_core": k.tensor_core,
            }
            for k in g.top_kernels
        ],
    }
