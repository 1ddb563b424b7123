"""CUDA memory snapshot (pickle of `torch.cuda.memory._snapshot()`) -> MemorySummary.

Format (torch/cuda/memory.py `_snapshot` docstring): `segments` (cudaMalloc'd memory, each
with `blocks` in state active_allocated / active_pending_free / inactive, their `size`, the
`requested_size` the caller asked for, and their allocation `frames`), `device_traces` (per
device, the allocator's history: alloc, free_requested, free_completed, segment_alloc,
segment_free, segment_map, segment_unmap, oom, snapshot; each with addr, size, stream,
frames innermost first, time_us), `allocator_settings` and `external_annotations`.

Replay, the way PyTorch's own viewer (torch/utils/viz/MemoryViz.js, `process_alloc_data`,
behind `torch.cuda._memory_viz trace_plot`) does it, so that the peaks are the ones it shows:
the history is a ring buffer that may begin long after training began, so the memory live at
its first entry is (a) every active_allocated block of the snapshot (at its requested size)
that no alloc entry of the history accounts for, plus (b) every block the history frees
without having recorded its allocation. Allocated bytes then move on alloc (+ its size) and
free_completed (- the size) -- memory is reusable only once the free completed. Reserved
bytes: the snapshot's segments minus what the history did to them (segment_alloc/map +,
segment_free/unmap -), which is the viewer's "Active Cached Memory Timeline".

Fragmentation is read two ways: at the allocated peak, reserved minus allocated (cached but
holding no tensor); and at the snapshot, from the segments' blocks: total free (inactive
blocks: external; a live block's size beyond its request: internal, the allocator's
rounding) and the largest free block, the biggest tensor that fits without a new cudaMalloc.

Which heuristics split the peak into parameters / gradients / optimizer state / activations:
see perfdoctor/analyze/memory_sites.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfdoctor.analyze.memory_events import cache_fragmented, last_oom
from perfdoctor.analyze.memory_sites import (
    CATEGORIES,
    AllocationSite,
    SitePicker,
    categorize,
    rank_sites,
)
from perfdoctor.analyze.memory_sites import plain_int as _int
from perfdoctor.analyze.memory_snapshot import load_snapshot
from perfdoctor.errors import CorruptArtifact
from perfdoctor.model import SourceLocation
from perfdoctor.units import format_bytes

__all__ = [
    "CATEGORIES",
    "MAX_TIMELINE_POINTS",
    "SNAPSHOT_FACTS",
    "AllocationSite",
    "MemorySummary",
    "SnapshotAnalysis",
    "analyze_snapshot",
    "load_memory",
    "load_snapshot",
    "memory_peak_locations",
    "memory_series",
    "snapshot_facts",
    "summarize_snapshot",
]

MAX_TIMELINE_POINTS = 400
MAX_DEVICES = 1024
_LIVE_STATES = ("active_allocated", "active_awaiting_free", "active_pending_free")
_SEGMENT_UP = ("segment_alloc", "segment_map")
_SEGMENT_DOWN = ("segment_free", "segment_unmap")


@dataclass(frozen=True)
class DeviceBrief:
    """One device of a snapshot that is not the one analysed in full."""

    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    oom_events: int
    history_entries: int


@dataclass(frozen=True)
class MemorySummary:
    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_peak_bytes: int
    fragmentation_frac: float | None  # (reserved - allocated) / reserved at the allocated peak
    final_allocated_bytes: int  # requested bytes of the live blocks at the snapshot
    final_reserved_bytes: int
    oom_events: int
    alloc_retries: int | None
    history_entries: int
    history_truncated: bool
    timeline_t_s: tuple[float, ...]  # seconds since the first history entry (or entry index)
    timeline_allocated_bytes: tuple[int, ...]
    timeline_peak_index: int | None
    top_sites: tuple[AllocationSite, ...]  # live at the peak, share of the peak
    categories_at_peak: dict[str, int] = field(default_factory=dict)  # keys: CATEGORIES
    notes: tuple[str, ...] = ()
    timeline_reserved_bytes: tuple[int, ...] = ()
    timeline_is_time: bool = True  # False: the x axis is the history entry index
    top_sites_overall: tuple[AllocationSite, ...] = ()  # every alloc of the history, share of
    allocated_in_history_bytes: int = 0  #                their total (this figure)
    peak_time_s: float | None = None
    peak_during: str | None = None  # the external annotation (Optimizer.step, ...) it fell in
    # At the snapshot, from the segments' blocks:
    free_bytes: int = 0  # reserved minus requested bytes of live blocks
    free_internal_bytes: int = 0  # rounding inside live blocks
    largest_free_block_bytes: int = 0
    segments: int = 0
    expandable_segments: bool | None = None
    allocator_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF as the allocator saw it
    # The last out-of-memory of the history (analyze/memory_events.py): the failed request
    # and the device's free memory then; None without an `oom` entry.
    oom_request_bytes: int | None = None
    oom_device_free_bytes: int | None = None
    # The snapshot's other devices (with segments or history), in device order.
    other_devices: tuple[DeviceBrief, ...] = ()

    @property
    def activation_bytes_frac(self) -> float | None:
        total = sum(self.categories_at_peak.values())
        if not total or "activations" not in self.categories_at_peak:
            return None
        return self.categories_at_peak["activations"] / total

    @property
    def largest_free_block_frac(self) -> float | None:
        """Largest free block over all free memory in inactive blocks at the snapshot: near 1,
        the free memory is one piece; near 0, it is scattered in small gaps."""
        external = self.free_bytes - self.free_internal_bytes
        return self.largest_free_block_bytes / external if external > 0 else None


def load_memory(
    path: Path, *, user_roots: Sequence[str | Path] = (), max_entries: int | None = None
) -> MemorySummary:
    """The summary of the snapshot pickle at `path` (read with the restricted unpickler).
    `user_roots`: the user's source directories; without them the site of an allocation is
    its innermost frame outside torch, the standard library and site-packages."""
    data = load_snapshot(path)
    try:
        return summarize_snapshot(data, user_roots=user_roots, max_entries=max_entries)
    except (TypeError, ValueError, OverflowError, IndexError, KeyError, AttributeError) as err:
        # The values are untrusted: a shape no real snapshot has is a corrupt artifact.
        raise CorruptArtifact(
            f"corrupt memory snapshot {path}: unexpected content ({type(err).__name__}: {err})"
        ) from err


def summarize_snapshot(
    data: dict[str, Any],
    *,
    user_roots: Sequence[str | Path] = (),
    max_entries: int | None = None,
    top: int = 5,
) -> MemorySummary:
    """The summary of one device of the snapshot (it covers every device the process used),
    with the others in brief: the device that ran out of memory, or else the one with the
    highest peak. A three-device snapshot with its OOM on device 1 was analysed without
    naming the device and without a word of the other two."""
    by_device: dict[int, list[dict[str, Any]]] = {}
    for seg in _list(data.get("segments")):
        if isinstance(seg, dict):
            by_device.setdefault(_int(seg.get("device", 0)), []).append(seg)
    traces = _list(data.get("device_traces"))
    devices = set(by_device) | {i for i, t in enumerate(traces) if t}
    if len(devices) > MAX_DEVICES:
        # Each device is analysed on its own: a snapshot claiming thousands would take as many
        # passes. No machine has that many GPUs in one process.
        raise ValueError(f"it names {len(devices):,} devices (at most {MAX_DEVICES} are read)")
    picker = SitePicker(user_roots)
    summaries = [
        _summarize_device(d, by_device.get(d, []), traces, picker, max_entries, top, data)
        for d in sorted(devices or {0})
    ]
    chosen = max(
        summaries,
        key=lambda s: (s.oom_events > 0, s.peak_allocated_bytes, s.peak_reserved_bytes),
    )
    others = tuple(
        DeviceBrief(
            s.device,
            s.peak_allocated_bytes,
            s.peak_reserved_bytes,
            s.oom_events,
            s.history_entries,
        )
        for s in summaries
        if s is not chosen
    )
    return replace(chosen, other_devices=others) if others else chosen


def _several_devices(data: dict[str, Any]) -> bool:
    devices = {
        _int(seg.get("device", 0)) for seg in _list(data.get("segments")) if isinstance(seg, dict)
    }
    devices |= {i for i, t in enumerate(_list(data.get("device_traces"))) if t}
    return len(devices) > 1


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _time(value: Any) -> float:
    """time_us from untrusted data; NaN when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def _addr(value: Any) -> int | None:
    """An address to match allocations and frees by; None for anything that is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _requested(block: dict[str, Any]) -> int:
    return _int(block.get("requested_size", block.get("size")))


@dataclass
class _Segments:
    """The snapshot's segments of one device, and what their blocks say."""

    reserved: int = 0
    live: list[dict[str, Any]] = field(default_factory=list)  # active_allocated blocks
    live_bytes: int = 0
    free_internal: int = 0
    largest_free: int = 0
    count: int = 0


def _read_segments(segments: list[dict[str, Any]], device: int) -> _Segments:
    out = _Segments()
    for seg in segments:
        if _int(seg.get("device", 0)) != device:
            continue
        out.count += 1
        out.reserved += _int(seg.get("total_size"))
        addr = _int(seg.get("address"))
        for b in _list(seg.get("blocks")):
            if not isinstance(b, dict):
                continue
            size = _int(b.get("size"))
            b.setdefault("address", addr)  # older snapshots: blocks follow each other
            addr += size
            # As torch.cuda._memory_viz.segsum counts: what is not active_allocated is free
            # (a block pending free is reusable once its stream events complete).
            if b.get("state") == "active_allocated":
                out.live.append(b)
                out.live_bytes += _requested(b)
                out.free_internal += max(size - _requested(b), 0)
            elif b.get("state") not in _LIVE_STATES:
                out.largest_free = max(out.largest_free, size)
    return out


def _summarize_device(
    device: int,
    segments: list[dict[str, Any]],
    traces: list[Any],
    picker: SitePicker,
    max_entries: int | None,
    top: int,
    data: dict[str, Any],
) -> MemorySummary:
    segs = _read_segments(segments, device)
    raw = traces[device] if 0 <= device < len(traces) else []
    entries = [e for e in _list(raw) if isinstance(e, dict)]
    notes: list[str] = []
    stats = data.get("memory_stats")
    if not isinstance(stats, dict) or _several_devices(data):
        # memory_stats is one device's (torch.cuda.memory_stats()): with several devices in
        # the snapshot it would give each of them the OOMs of one.
        stats = {}
    retries = stats.get("num_alloc_retries", data.get("num_alloc_retries"))
    ooms = sum(1 for e in entries if e.get("action") == "oom")
    ooms = max(ooms, _int(stats.get("num_ooms", data.get("num_ooms"))))
    failed = last_oom(entries)
    truncated = bool(max_entries) and len(entries) >= int(max_entries or 0)
    if truncated:
        notes.append(
            f"the allocator history holds {len(entries)} entries, its limit: older events "
            "were dropped, so the peak is the peak of the recorded window"
        )
    settings = data.get("allocator_settings")
    settings = settings if isinstance(settings, dict) else {}
    expandable = settings.get("expandable_segments")
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    common: dict[str, Any] = {
        "device": device,
        "final_allocated_bytes": segs.live_bytes,
        "final_reserved_bytes": segs.reserved,
        "oom_events": ooms,
        "alloc_retries": _int(retries) if retries is not None else None,
        "history_truncated": truncated,
        "free_bytes": segs.reserved - segs.live_bytes,
        "free_internal_bytes": segs.free_internal,
        "largest_free_block_bytes": segs.largest_free,
        "segments": segs.count,
        "expandable_segments": expandable if isinstance(expandable, bool) else None,
        "allocator_conf": conf if isinstance(conf, str) else None,
        "oom_request_bytes": failed.size if failed else None,
        "oom_device_free_bytes": failed.device_free if failed else None,
    }
    stacks = any(e.get("frames") or e.get("category") for e in entries)
    if not entries:
        notes.append("no allocator history (recording was off): peak = state at the snapshot")
        stacks = any(b.get("frames") for b in segs.live)
        blocks = [(_list(b.get("frames")), _requested(b)) for b in segs.live]
        return MemorySummary(
            peak_allocated_bytes=segs.live_bytes,
            peak_reserved_bytes=segs.reserved,
            reserved_at_peak_bytes=segs.reserved,
            fragmentation_frac=_frag(segs.live_bytes, segs.reserved),
            history_entries=0,
            timeline_t_s=(),
            timeline_allocated_bytes=(),
            timeline_peak_index=None,
            top_sites=rank_sites(blocks, segs.live_bytes, picker, top),
            categories_at_peak=categorize((f, s, None) for f, s in blocks) if stacks else {},
            notes=tuple(notes),
            **common,
        )

    replay = _replay(entries, segs)
    if replay.clamped:
        notes.append("the history does not add up to the snapshot's state; clamped at zero")
    peak_i = replay.peak_index
    peak_alloc = int(replay.allocated[peak_i])
    reserved_at_peak = int(replay.reserved[peak_i])
    live = replay.live_at(peak_i)
    categories: dict[str, int] = {}
    if stacks:
        categories = categorize(
            (_list(e.get("frames")), size, e.get("category")) for e, size in live if e is not None
        )
        categories["unknown"] = sum(size for e, size in live if e is None)
    else:
        notes.append("the history has no stacks: no split by parameters/gradients/activations")
    times = replay.times
    t_s, alloc_series, reserved_series, peak_pos = _timeline(
        times, replay.allocated, replay.reserved, peak_i
    )
    allocs = [e for e in entries if e.get("action") == "alloc"]
    churn = sum(_int(e.get("size")) for e in allocs)
    return MemorySummary(
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=int(max(replay.reserved.max(), segs.reserved)),
        reserved_at_peak_bytes=reserved_at_peak,
        fragmentation_frac=_frag(peak_alloc, reserved_at_peak),
        history_entries=len(entries),
        timeline_t_s=t_s,
        timeline_allocated_bytes=alloc_series,
        timeline_peak_index=peak_pos,
        top_sites=rank_sites(
            ((_list(e.get("frames")), size) for e, size in live if e is not None),
            peak_alloc,
            picker,
            top,
        ),
        categories_at_peak=categories,
        notes=tuple(notes),
        timeline_reserved_bytes=reserved_series,
        timeline_is_time=bool(np.isfinite(times).all()),
        top_sites_overall=rank_sites(
            ((_list(e.get("frames")), _int(e.get("size"))) for e in allocs), churn, picker, top
        ),
        allocated_in_history_bytes=churn,
        peak_time_s=float(times[peak_i] - times[0]) / 1e6
        if np.isfinite(times[[0, peak_i]]).all()
        else None,
        peak_during=_annotation_at(data, device, times[peak_i]),
        **common,
    )


@dataclass
class _Replay:
    entries: list[dict[str, Any]]
    allocated: np.ndarray  # after each entry
    reserved: np.ndarray
    times: np.ndarray  # time_us, NaN where absent
    initial: list[tuple[dict[str, Any] | None, int, int]]  # (alloc entry or None, size, end)
    clamped: bool

    @property
    def peak_index(self) -> int:
        return int(np.argmax(self.allocated))

    def live_at(self, index: int) -> list[tuple[dict[str, Any] | None, int]]:
        """Blocks live right after entry `index`: (the alloc entry, or None when the block
        predates the history, and its size)."""
        live: dict[Any, tuple[dict[str, Any] | None, int]] = {}
        for i, e in enumerate(self.entries[: index + 1]):
            addr = _addr(e.get("addr"))
            if e.get("action") == "alloc":
                live[addr if addr is not None else ("no address", i)] = (e, _int(e.get("size")))
            elif e.get("action") == "free_completed":
                live.pop(addr, None)
        before = [(None, size) for _, size, end in self.initial if end > index]
        return before + list(live.values())


def _replay(entries: list[dict[str, Any]], segs: _Segments) -> _Replay:
    n = len(entries)
    d_alloc = np.zeros(n, dtype=np.int64)
    d_reserved = np.zeros(n, dtype=np.int64)
    times = np.full(n, np.nan)
    live: dict[Any, int] = {}  # addr -> size of the allocation the history recorded
    initial: list[tuple[dict[str, Any] | None, int, int]] = []
    for i, e in enumerate(entries):
        action = e.get("action")
        size = _int(e.get("size"))
        addr = _addr(e.get("addr"))
        if action == "alloc":
            d_alloc[i] = size
            if addr is not None:
                live[addr] = size
        elif action == "free_completed":
            if addr is not None and addr in live:
                d_alloc[i] = -live.pop(addr)
            else:  # allocated before the history began: live from its start until here
                initial.append((None, size, i))
                d_alloc[i] = -size
        elif action in _SEGMENT_UP:
            d_reserved[i] = size
        elif action in _SEGMENT_DOWN:
            d_reserved[i] = -size
        times[i] = _time(e.get("time_us"))
    # Live at the snapshot and not allocated within the history: live all along.
    initial += [(None, _requested(b), n) for b in segs.live if _addr(b.get("address")) not in live]
    start_alloc = sum(size for _, size, _ in initial)
    start_reserved = segs.reserved - int(d_reserved.sum())
    allocated = start_alloc + np.cumsum(d_alloc)
    reserved = start_reserved + np.cumsum(d_reserved)
    clamped = bool(start_reserved < 0 or (allocated.size and allocated.min() < 0))
    return _Replay(
        entries,
        np.maximum(allocated, 0),
        np.maximum(reserved, 0),
        times,
        initial,
        clamped,
    )


def _frag(allocated: int, reserved: int) -> float | None:
    return max(reserved - allocated, 0) / reserved if reserved > 0 else None


def _timeline(
    times: np.ndarray, allocated: np.ndarray, reserved: np.ndarray, peak_i: int
) -> tuple[tuple[float, ...], tuple[int, ...], tuple[int, ...], int]:
    """At most MAX_TIMELINE_POINTS points; each keeps its bucket's maximum (of allocated and
    of reserved) so that the peaks survive the downsampling."""
    n = allocated.size
    if np.isfinite(times).all() and n:
        t = (times - times[0]) / 1e6
    else:
        t = np.arange(n, dtype=np.float64)  # no timestamps: entry index as the x axis
    if n <= MAX_TIMELINE_POINTS:
        return (
            tuple(t.tolist()),
            tuple(int(x) for x in allocated.tolist()),
            tuple(int(x) for x in reserved.tolist()),
            peak_i,
        )
    edges = np.linspace(0, n, MAX_TIMELINE_POINTS + 1).astype(np.int64)
    peak_bucket = int(np.searchsorted(edges, peak_i, side="right") - 1)
    bucket_t = t[edges[:-1]].copy()
    bucket_t[peak_bucket] = t[peak_i]  # the peak marker sits at the peak's own time
    return (
        tuple(bucket_t.tolist()),
        tuple(int(x) for x in np.maximum.reduceat(allocated, edges[:-1]).tolist()),
        tuple(int(x) for x in np.maximum.reduceat(reserved, edges[:-1]).tolist()),
        peak_bucket,
    )


def _annotation_at(data: dict[str, Any], device: int, time_us: float) -> str | None:
    """The innermost START/END annotation (record_function ranges the snapshot recorded, such
    as `Optimizer.step#AdamW.step`) open at `time_us`."""
    if not np.isfinite(time_us):
        return None
    opened: dict[str, float] = {}
    hit: tuple[float, str] | None = None
    for a in _list(data.get("external_annotations")):
        if not isinstance(a, dict) or _int(a.get("device", device)) != device:
            continue
        name, t = a.get("name"), _time(a.get("time_us"))
        if not isinstance(name, str) or not math.isfinite(t):
            continue
        if a.get("stage") == "START":
            opened[name] = float(t)
        elif a.get("stage") == "END" and name in opened:
            start = opened.pop(name)
            if start <= time_us <= t and (hit is None or start > hit[0]):
                hit = (start, name)
    for name, start in opened.items():  # still open when the snapshot was taken
        if start <= time_us and (hit is None or start > hit[0]):
            hit = (start, name)
    return hit[1].split("#", 1)[0] if hit else None


SNAPSHOT_FACTS = (
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_allocated_frac",
    "fragmentation_frac",
    "alloc_retries",
    "oom_events",
    "activation_bytes_frac",
    "optimizer_state_bytes_frac",
    "largest_free_block_frac",
    "expandable_segments",
    "memory_history_truncated",
    "memory_history_entries",
    "oom_request_bytes",
    "oom_device_free_bytes",
    "memory_cache_fragmented",
    "memory_device",
    "memory_devices",
    "memory_other_devices",
)


def snapshot_facts(summary: MemorySummary, device_total: int | None = None) -> dict[str, Any]:
    """The facts (analyze/fact_catalog.py) a snapshot alone gives; `device_total`: the
    device's memory in bytes when known (a snapshot does not record it)."""
    cats = summary.categories_at_peak
    total = sum(cats.values())
    return {
        "peak_allocated_bytes": summary.peak_allocated_bytes,
        "peak_reserved_bytes": summary.peak_reserved_bytes,
        "peak_allocated_frac": summary.peak_allocated_bytes / device_total
        if isinstance(device_total, int) and device_total > 0
        else None,
        "fragmentation_frac": summary.fragmentation_frac,
        "alloc_retries": summary.alloc_retries,
        "oom_events": summary.oom_events,
        "activation_bytes_frac": summary.activation_bytes_frac,
        "optimizer_state_bytes_frac": cats.get("optimizer_state", 0) / total if total else None,
        "largest_free_block_frac": summary.largest_free_block_frac,
        "expandable_segments": summary.expandable_segments,
        "memory_history_truncated": summary.history_truncated,
        "memory_history_entries": summary.history_entries,
        "oom_request_bytes": summary.oom_request_bytes,
        "oom_device_free_bytes": summary.oom_device_free_bytes,
        "memory_device": summary.device,
        "memory_devices": 1 + len(summary.other_devices),
        "memory_other_devices": other_devices_text(summary.other_devices),
        "memory_cache_fragmented": cache_fragmented(
            summary.oom_request_bytes,
            summary.free_bytes - summary.free_internal_bytes,
            summary.largest_free_block_bytes,
        ),
    }


def other_devices_text(others: Sequence[DeviceBrief]) -> str | None:
    """'device 0: peak 3.1 GB allocated, no out-of-memory; device 2: ...' (None: no other)."""
    if not others:
        return None
    parts = []
    for o in others:
        oom = f"{o.oom_events} out-of-memory" if o.oom_events else "no out-of-memory"
        history = "" if o.history_entries else " (no history: the state at the snapshot)"
        parts.append(
            f"device {o.device}: peak {format_bytes(o.peak_allocated_bytes)} allocated, "
            f"{format_bytes(o.peak_reserved_bytes)} reserved, {oom}{history}"
        )
    return "; ".join(parts)


@dataclass(frozen=True)
class SnapshotAnalysis:
    """Everything a report needs from one snapshot pickle, given alone or beside a trace."""

    summary: MemorySummary
    facts: dict[str, Any]  # fact name -> value (analyze/fact_catalog.py), for Facts.values
    locations: dict[str, tuple[SourceLocation, ...]]  # for Facts.locations
    series: dict[str, Any]  # for Report.series["memory"][label]


def analyze_snapshot(
    path: Path,
    *,
    user_roots: Sequence[str | Path] = (),
    device_total: int | None = None,
    max_entries: int | None = None,
) -> SnapshotAnalysis:
    """A snapshot pickle on its own (`perfdoctor diagnose`): the summary, its facts, the
    peak's sites as finding locations, and the chart/section series. A memory snapshot comes
    from the CUDA caching allocator, so `device_is_cuda` is true; `device_total` (bytes, from
    a trace's deviceProperties when one is given) makes the capacity rules applicable.
    Raises UntrustedPickle or CorruptArtifact like load_memory."""
    summary = load_memory(path, user_roots=user_roots, max_entries=max_entries)
    facts = {"device_is_cuda": True, **snapshot_facts(summary, device_total)}
    if device_total:
        facts["device_total_memory_bytes"] = device_total
    locations = {"memory_peak": memory_peak_locations(summary)} if summary.top_sites else {}
    return SnapshotAnalysis(summary, facts, locations, memory_series(summary))


def memory_peak_locations(summary: MemorySummary) -> tuple[SourceLocation, ...]:
    """The top sites at the peak as finding locations (the `memory_peak` topic). Their share
    is of bytes, not of time, so it goes into the text and not into `share`, which the
    renderers print as a share of the time."""
    out = []
    for site in summary.top_sites:
        loc = site.location
        of_peak = f" ({loc.share:.1%} of the peak)" if loc.share is not None else ""
        what = f"{format_bytes(site.bytes)} live at the peak{of_peak} in {site.blocks} block(s)"
        out.append(SourceLocation(loc.file, loc.line, loc.function, call=what))
    return tuple(out)


def memory_series(summary: MemorySummary | None) -> dict[str, Any]:
    """The memory part of a report's series (plain JSON): the chart's timeline and what the
    renderers' memory section shows. Empty lists and None when there is no snapshot."""
    if summary is None:
        return {"t_s": [], "allocated_bytes": [], "peak_index": None}
    sites = [_site_json(s) for s in summary.top_sites]
    return {
        "t_s": list(summary.timeline_t_s),
        "allocated_bytes": list(summary.timeline_allocated_bytes),
        "reserved_bytes": list(summary.timeline_reserved_bytes),
        "peak_index": summary.timeline_peak_index,
        "x_is_time": summary.timeline_is_time,
        "summary": {
            "peak_allocated_bytes": summary.peak_allocated_bytes,
            "peak_reserved_bytes": summary.peak_reserved_bytes,
            "reserved_at_peak_bytes": summary.reserved_at_peak_bytes,
            "peak_time_s": summary.peak_time_s,
            "peak_during": summary.peak_during,
            "final_allocated_bytes": summary.final_allocated_bytes,
            "final_reserved_bytes": summary.final_reserved_bytes,
            "free_bytes": summary.free_bytes,
            "free_internal_bytes": summary.free_internal_bytes,
            "largest_free_block_bytes": summary.largest_free_block_bytes,
            "segments": summary.segments,
            "expandable_segments": summary.expandable_segments,
            "history_entries": summary.history_entries,
            "oom_events": summary.oom_events,
            "alloc_retries": summary.alloc_retries,
            "oom_request_bytes": summary.oom_request_bytes,
            "oom_device_free_bytes": summary.oom_device_free_bytes,
            "device": summary.device,
            "other_devices": [
                {
                    "device": o.device,
                    "peak_allocated_bytes": o.peak_allocated_bytes,
                    "peak_reserved_bytes": o.peak_reserved_bytes,
                    "oom_events": o.oom_events,
                    "history_entries": o.history_entries,
                }
                for o in summary.other_devices
            ],
            "categories_at_peak": dict(summary.categories_at_peak),
            "top_sites": sites,
            "top_sites_overall": [_site_json(s) for s in summary.top_sites_overall],
            "allocated_in_history_bytes": summary.allocated_in_history_bytes,
        },
    }


def _site_json(site: AllocationSite) -> dict[str, Any]:
    loc = site.location
    return {
        "file": loc.file,
        "line": loc.line,
        "function": loc.function,
        "bytes": site.bytes,
        "blocks": site.blocks,
        "share": loc.share,
    }
