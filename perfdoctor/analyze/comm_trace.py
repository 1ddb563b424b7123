"""A rank's collectives from its trace: each communication kernel's collective, size and bus
bandwidth, then per collective type transfer or waiting (comm_wait.py), and the parallelism
the mix points at.

Each kernel's collective and message size come from, in order: its own args (kineto >= 2.2
writes `Collective name`, `In msg nelems`, ... on NCCL kernels); the host op that launched
it (record_param_comms with those args, or the nccl:* / c10d:: span around the launch call,
found on the launching thread by time); its name. The host op matters: an NCCL all-to-all
runs as `SendRecv` kernels, a DLRM trace's `nccl:all_to_all` says what they are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze.comm_bandwidth import (
    Link,
    bus_factor,
    link_for,
    message_bytes,
    plausible_busbw,
)
from perfdoctor.analyze.comm_kernels import comm_kernel_mask, enclosing, host_spans
from perfdoctor.analyze.comm_wait import UNKNOWN, Sample, Verdict, classify
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, TraceEvents
from perfdoctor.analyze.trace_index import launch_rows

# The parallelism a collective mix points at, when its collectives take at least this share
# of the communication time (a choice: a clear majority of the traffic).
MIX_MAJORITY = 0.5
# An all-to-all share at least this large is worth its own advice even beside an all-reduce
# (a choice: DLRM's embedding all-to-all took 58% beside a 26% all-reduce).
ALL_TO_ALL_SHARE = 0.25


@dataclass(frozen=True)
class KindStats:
    kind: str
    count: int
    total_us: float
    share: float  # of the communication kernels' time
    sized: int  # kernels with a known message size
    bytes_total: float | None
    wait: Verdict


@dataclass(frozen=True)
class CommSummary:
    families: tuple[str, ...]  # nccl, rccl, deepep, symmetric_memory, ...
    kinds: tuple[KindStats, ...]  # most time first
    link: Link | None
    group_size: int | None  # the largest group recorded
    comm_us: float
    # Of the communication kernels' time whose verdict is known, the transfer part; and the
    # share of the communication time those kernels cover.
    transfer_frac: float | None
    verdict_coverage: float
    parallelism: str | None
    # Every communication kernel in start order as (collective type, duration µs): what
    # job_ranks.py matches across the ranks of a job.
    sequence: tuple[tuple[str, float], ...] = ()
    # Collectives whose recorded message size, over their kernel's time, would exceed
    # BUSBW_CEILING_GBS: their sizes are dropped as invalid input (comm_bandwidth.py).
    impossible_sizes: int = 0
    # The dtype the most communication time moved, as the trace writes it ("Float",
    # "BFloat16"); None when no collective recorded one.
    dtype: str | None = None

    @property
    def dominant(self) -> str | None:
        return self.kinds[0].kind if self.kinds else None

    def share_of(self, kind: str) -> float:
        return sum(k.share for k in self.kinds if k.kind == kind)

    def mix_text(self) -> str:
        return ", ".join(f"{k.kind.replace('_', '-')} {k.share:.0%}" for k in self.kinds[:4])


def _parallelism(kinds: dict[str, float], families: set[str]) -> str | None:
    """The parallelism the mix points at (by share of the communication time)."""
    if not kinds:
        return None
    a2a = kinds.get(coll.ALL_TO_ALL, 0.0)
    if families & {"deepep", "pplx"} and a2a > 0:
        return "expert_parallel"
    if kinds.get(coll.ALL_GATHER, 0.0) + kinds.get(coll.REDUCE_SCATTER, 0.0) >= MIX_MAJORITY:
        return "fsdp"
    if a2a >= ALL_TO_ALL_SHARE:
        return "all_to_all"
    if kinds.get(coll.SEND_RECV, 0.0) >= MIX_MAJORITY:
        return "pipeline"
    # Symmetric-memory and custom all-reduce kernels serve tensor parallelism (many small
    # all-reduces inside each layer), not DDP's bucketed gradient all-reduce.
    if families & {"symmetric_memory", "custom_all_reduce"} and (
        kinds.get(coll.ALL_REDUCE, 0.0) >= MIX_MAJORITY
    ):
        return "tensor_parallel"
    if kinds.get(coll.ALL_REDUCE, 0.0) >= MIX_MAJORITY:
        return "data_parallel"
    return None


def _device_name(ev: TraceEvents, device: int) -> str | None:
    props = ev.devices
    named = [d.name for d in props if d.index == device and d.name]
    return named[0] if named else next((d.name for d in props if d.name), None)


def summarize_comm(ev: TraceEvents) -> CommSummary | None:
    """The communication kernels of the busiest device; None when it ran none."""
    gpu = ev.gpu
    if len(gpu) == 0:
        return None
    devices = gpu.col("device")
    busiest = max(np.unique(devices).tolist(), key=lambda d: float(gpu.dur[devices == d].sum()))
    device_name = _device_name(ev, int(busiest))
    # ROCm's RCCL keeps NCCL's kernel names: on an AMD device they are RCCL's.
    on_amd = any(d.vendor == "AMD" for d in ev.devices)
    rows = np.flatnonzero((devices == busiest) & (gpu.col("kind") == GPU_KIND_KERNEL))
    rows = rows[comm_kernel_mask(ev, rows)]
    if rows.size == 0:
        return None
    rows = rows[np.argsort(gpu.ts[rows], kind="stable")]
    launch = launch_rows(ev, rows)
    spans = host_spans(ev)
    samples: dict[str, list[Sample]] = defaultdict(list)
    bytes_by: dict[str, float] = defaultdict(float)
    dtype_us: dict[str, float] = defaultdict(float)
    families: set[str] = set()
    groups: list[int] = []
    sequence: list[tuple[str, float]] = []
    world = (ev.distributed_info.world_size if ev.distributed_info else None) or None
    impossible = 0  # collectives whose recorded size would move faster than any link
    # One comm kernel per iteration; what depends only on a name is worked out once per
    # name, and the columns are read as lists, not indexed row by row.
    family_of: dict[int, str] = {}
    kind_of: dict[tuple[str, str | None], str] = {}
    launch_list = launch.tolist()
    launch_tid = ev.runtime.tid[np.maximum(launch, 0)].tolist() if len(ev.runtime) else []
    launch_ts = ev.runtime.ts[np.maximum(launch, 0)].tolist() if len(ev.runtime) else []
    durs = gpu.dur[rows].tolist()
    for i, (row, code) in enumerate(zip(rows.tolist(), gpu.name[rows].tolist(), strict=True)):
        name = ev.names[code]
        family = family_of.get(code)
        if family is None:
            # Named by its launch inside a collective's host call, not by a known library.
            family = family_of[code] = coll.kernel_family(name) or "launched_in_collective"
        families.add("rccl" if on_amd and family == "nccl" else family)
        args = ev.comm_gpu.get(row)
        host_name = None
        if launch_list[i] >= 0:
            tid = launch_tid[i]
            if tid in spans:
                host_name, host_args = enclosing(spans[tid], launch_ts[i])
                args = args or host_args
        recorded = args.collective if args is not None else None
        key = (name, recorded or host_name)
        kind = kind_of.get(key)
        if kind is None:
            kind = kind_of[key] = coll.collective_kind(*key)
        ranks = (args.group_size if args is not None else None) or world
        size = (
            message_bytes(kind, args.in_nelems, args.out_nelems, args.dtype)
            if args is not None
            else None
        )
        dur = durs[i]
        sequence.append((kind, dur))
        if ranks is not None and ranks < 1:
            ranks = None
        if size is not None and ranks and not plausible_busbw(kind, size, dur, ranks):
            size = None  # not physically possible: the size is invalid input, not a measurement
            impossible += 1
        if args is not None and args.dtype:
            dtype_us[args.dtype] += dur
        if ranks:
            groups.append(ranks)
        if size is not None:
            bytes_by[kind] += size
        samples[kind].append(
            Sample(
                dur_us=dur,
                size_bytes=float(size) if size is not None else None,
                bus_factor=bus_factor(kind, ranks) if ranks and size is not None else None,
            )
        )
    comm_us = float(sum(s.dur_us for group in samples.values() for s in group))
    group_size = max(groups) if groups else None
    link = link_for(device_name, group_size)
    stats = []
    for kind, group in samples.items():
        total = float(sum(s.dur_us for s in group))
        sized = sum(1 for s in group if s.size_bytes is not None)
        stats.append(
            KindStats(
                kind=kind,
                count=len(group),
                total_us=total,
                share=total / comm_us if comm_us > 0 else 0.0,
                sized=sized,
                bytes_total=bytes_by.get(kind) if sized else None,
                wait=classify(group, link.gbs if link else None),
            )
        )
    stats.sort(key=lambda k: -k.total_us)
    judged = [k for k in stats if k.wait.verdict != UNKNOWN and k.wait.transfer_us is not None]
    judged_us = sum(k.total_us for k in judged)
    transfer = sum(k.wait.transfer_us or 0.0 for k in judged)
    return CommSummary(
        families=tuple(sorted(families)),
        kinds=tuple(stats),
        link=link,
        group_size=group_size,
        comm_us=comm_us,
        transfer_frac=transfer / judged_us if judged_us > 0 else None,
        verdict_coverage=judged_us / comm_us if comm_us > 0 else 0.0,
        parallelism=_parallelism({k.kind: k.share for k in stats}, families),
        sequence=tuple(sequence),
        impossible_sizes=impossible,
        dtype=max(dtype_us, key=lambda d: dtype_us[d]) if dtype_us else None,
    )
