"""CUDA memory snapshot (pickle of `torch.cuda.memory._snapshot()`) -> MemorySummary.

Loading. A pickle can run arbitrary code, and run directories get shared, so the snapshot is
read by an unpickler whose `find_class` refuses every global: only the plain values a
snapshot holds (dicts, lists, tuples, str, bytes, numbers, bool, None) can be built. Anything
else raises UntrustedPickle before a single object of it exists.

Format (torch/cuda/memory.py `_snapshot` docstring): `segments` (cudaMalloc'd memory, each
with `blocks` in state active_allocated / active_awaiting_free / inactive and their
allocation `frames`) and `device_traces` (per device, the allocator's history: alloc,
free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
oom, snapshot; each with addr, size, stream, frames innermost first, time_us).

Replay. The history is a ring buffer that may begin long after training began, so the state
at its first entry is not "empty": it is the state at the snapshot (which the segments give
exactly) minus everything the history did. Allocated bytes move on alloc (+) and
free_completed (-) -- memory is reusable only once the free completed -- and reserved bytes on
segment_alloc/map (+) and segment_free/unmap (-).

Split at the peak (heuristic, from each live block's allocation stack; the `category` field
that torch's profiler-derived snapshots carry wins when present):
  optimizer_state  a frame in torch/optim/ (exp_avg, momentum buffers, ...)
  gradients        allocated under backward (torch/autograd/, Tensor.backward, or with no
                   Python stack at all: on CUDA backward runs in the autograd engine's device
                   threads, which have none) -- this also holds backward's temporaries,
                   which are rarely live at the peak
  activations      allocated under a module's forward (torch/nn/modules/, _call_impl)
  parameters       allocated by Module.to/cuda/_apply, nn/init or nn/parameter.py
  other            everything else (input batches, user tensors, unknown stacks)
Blocks allocated before the history began and still live have no trace entry; they count as
"before_history" (usually parameters, moved to the GPU before training). A history recorded
without stacks gives no split at all.
"""

from __future__ import annotations

import io
import pickle
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfdoctor.analyze.frames import UserCode
from perfdoctor.errors import CorruptArtifact, UntrustedPickle
from perfdoctor.model import SourceLocation

MAX_TIMELINE_POINTS = 2000
_LIVE_STATES = ("active_allocated", "active_awaiting_free", "active_pending_free")
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")


class _PlainUnpickler(pickle.Unpickler):
    """Builds only plain containers and scalars: every global lookup is refused."""

    def __init__(self, fh: io.BufferedIOBase, path: Path) -> None:
        super().__init__(fh)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        raise UntrustedPickle(
            f"refusing to load {self._path}: it asks for {module}.{name}, and a memory "
            "snapshot holds only plain data"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UntrustedPickle(f"refusing to load {self._path}: it uses persistent ids")


def load_snapshot(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = _PlainUnpickler(fh, path).load()
    except UntrustedPickle:
        raise
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, IndexError) as err:
        raise CorruptArtifact(f"corrupt memory snapshot {path}: {err}") from err
    except (MemoryError, OverflowError) as err:
        # A length field claiming more bytes than the file holds (2**62 in 20 bytes): the
        # file is corrupt, not the machine short of memory.
        raise CorruptArtifact(
            f"corrupt memory snapshot {path}: it claims an object too large to load "
            f"({type(err).__name__}, file of {path.stat().st_size:,} bytes)"
        ) from err
    if not isinstance(data, dict) or not isinstance(data.get("segments", []), list):
        raise CorruptArtifact(f"{path} is not a CUDA memory snapshot (no segments list)")
    return data


@dataclass(frozen=True)
class AllocationSite:
    location: SourceLocation  # share = fraction of allocated bytes at the peak
    bytes: int
    blocks: int


@dataclass(frozen=True)
class MemorySummary:
    device: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_peak_bytes: int
    fragmentation_frac: float | None  # (reserved - allocated) / reserved at the allocated peak
    final_allocated_bytes: int
    final_reserved_bytes: int
    oom_events: int
    alloc_retries: int | None
    history_entries: int
    history_truncated: bool
    timeline_t_s: tuple[float, ...]
    timeline_allocated_bytes: tuple[int, ...]
    timeline_peak_index: int | None
    top_sites: tuple[AllocationSite, ...]
    categories_at_peak: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def activation_bytes_frac(self) -> float | None:
        total = sum(self.categories_at_peak.values())
        if not total or "activations" not in self.categories_at_peak:
            return None
        return self.categories_at_peak["activations"] / total


def summarize_snapshot(
    data: dict[str, Any],
    *,
    user_roots: Sequence[str | Path] = (),
    max_entries: int | None = None,
    top: int = 5,
) -> MemorySummary:
    segments = [s for s in data.get("segments", []) if isinstance(s, dict)]
    traces = data.get("device_traces") or []
    devices = {int(s.get("device", 0)) for s in segments}
    devices |= {i for i, t in enumerate(traces) if t}
    if not devices:
        devices = {0}
    summaries = [
        _summarize_device(d, segments, traces, user_roots, max_entries, top, data)
        for d in sorted(devices)
    ]
    return max(summaries, key=lambda s: (s.peak_allocated_bytes, s.peak_reserved_bytes))


def load_memory(
    path: Path, *, user_roots: Sequence[str | Path] = (), max_entries: int | None = None
) -> MemorySummary:
    return summarize_snapshot(load_snapshot(path), user_roots=user_roots, max_entries=max_entries)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _summarize_device(
    device: int,
    segments: list[dict[str, Any]],
    traces: list[Any],
    user_roots: Sequence[str | Path],
    max_entries: int | None,
    top: int,
    data: dict[str, Any],
) -> MemorySummary:
    segs = [s for s in segments if _int(s.get("device", 0)) == device]
    blocks = [b for s in segs for b in s.get("blocks", []) if isinstance(b, dict)]
    live_blocks = [b for b in blocks if b.get("state") in _LIVE_STATES]
    final_alloc = sum(_int(b.get("size")) for b in live_blocks)
    final_reserved = sum(_int(s.get("total_size")) for s in segs)
    entries = traces[device] if device < len(traces) and isinstance(traces[device], list) else []
    entries = [e for e in entries if isinstance(e, dict)]
    notes: list[str] = []
    user = UserCode(user_roots)

    d_alloc = np.zeros(len(entries), dtype=np.int64)
    d_reserved = np.zeros(len(entries), dtype=np.int64)
    times = np.full(len(entries), np.nan)
    ooms = 0
    for i, e in enumerate(entries):
        action = e.get("action")
        size = _int(e.get("size"))
        if action == "alloc":
            d_alloc[i] = size
        elif action == "free_completed":
            d_alloc[i] = -size
        elif action in ("segment_alloc", "segment_map"):
            d_reserved[i] = size
        elif action in ("segment_free", "segment_unmap"):
            d_reserved[i] = -size
        elif action == "oom":
            ooms += 1
        if isinstance(e.get("time_us"), (int, float)):
            times[i] = float(e["time_us"])

    stats = data.get("memory_stats") if isinstance(data.get("memory_stats"), dict) else {}
    retries = stats.get("num_alloc_retries", data.get("num_alloc_retries"))
    ooms = max(ooms, _int(stats.get("num_ooms", data.get("num_ooms"))))
    truncated = bool(max_entries) and len(entries) >= int(max_entries or 0)
    if truncated:
        notes.append(
            f"the allocator history holds {len(entries)} entries, its limit: older events "
            "were dropped, so the peak is the peak of the recorded window"
        )

    if not entries:
        notes.append("no allocator history (recording was off): peak = state at the snapshot")
        return MemorySummary(
            device=device,
            peak_allocated_bytes=final_alloc,
            peak_reserved_bytes=final_reserved,
            reserved_at_peak_bytes=final_reserved,
            fragmentation_frac=_frag(final_alloc, final_reserved),
            final_allocated_bytes=final_alloc,
            final_reserved_bytes=final_reserved,
            oom_events=ooms,
            alloc_retries=_int(retries) if retries is not None else None,
            history_entries=0,
            history_truncated=False,
            timeline_t_s=(),
            timeline_allocated_bytes=(),
            timeline_peak_index=None,
            top_sites=_sites(
                [(b.get("frames") or [], _int(b.get("size"))) for b in live_blocks],
                final_alloc,
                user,
                top,
            ),
            categories_at_peak=_categorize(
                [(b.get("frames") or [], _int(b.get("size")), None) for b in live_blocks]
            )
            if any(b.get("frames") for b in live_blocks)
            else {},
            notes=tuple(notes),
        )

    start_alloc = final_alloc - int(d_alloc.sum())
    start_reserved = final_reserved - int(d_reserved.sum())
    if start_alloc < 0 or start_reserved < 0:
        notes.append("the history does not add up to the snapshot's state; clamped at zero")
    allocated = np.maximum(start_alloc + np.cumsum(d_alloc), 0)
    reserved = np.maximum(start_reserved + np.cumsum(d_reserved), 0)
    peak_i = int(np.argmax(allocated))
    peak_alloc = int(allocated[peak_i])
    reserved_at_peak = int(reserved[peak_i])
    peak_reserved = int(max(reserved.max(), final_reserved))

    live, before_history = _live_at(entries, peak_i, live_blocks)
    attributed = [(frames, size, cat) for frames, size, cat in live.values()]
    unknown = peak_alloc - sum(s for _, s, _ in attributed) - sum(before_history)
    categories: dict[str, int] = {}
    if any(e.get("frames") or e.get("category") for e in entries):
        categories = _categorize(attributed)
        if before_history or unknown > 0:
            categories["before_history"] = sum(before_history) + max(unknown, 0)
    else:
        notes.append("the history has no stacks: no split by parameters/gradients/activations")

    t_s, series, peak_pos = _timeline(times, allocated, peak_i)
    return MemorySummary(
        device=device,
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=peak_reserved,
        reserved_at_peak_bytes=reserved_at_peak,
        fragmentation_frac=_frag(peak_alloc, reserved_at_peak),
        final_allocated_bytes=final_alloc,
        final_reserved_bytes=final_reserved,
        oom_events=ooms,
        alloc_retries=_int(retries) if retries is not None else None,
        history_entries=len(entries),
        history_truncated=truncated,
        timeline_t_s=t_s,
        timeline_allocated_bytes=series,
        timeline_peak_index=peak_pos,
        top_sites=_sites([(f, s) for f, s, _ in attributed], peak_alloc, user, top),
        categories_at_peak=categories,
        notes=tuple(notes),
    )


def _frag(allocated: int, reserved: int) -> float | None:
    return (reserved - allocated) / reserved if reserved > 0 else None


def _live_at(
    entries: list[dict[str, Any]], peak_i: int, live_blocks: list[dict[str, Any]]
) -> tuple[dict[Any, tuple[list[Any], int, str | None]], list[int]]:
    """Blocks live right after entry peak_i: (allocated within the history, sizes of the ones
    allocated before it that are still live at the snapshot)."""
    live: dict[Any, tuple[list[Any], int, str | None]] = {}
    allocated_in_history: set[Any] = set()
    for i, e in enumerate(entries):
        action = e.get("action")
        if action == "alloc":
            allocated_in_history.add(e.get("addr"))
            if i <= peak_i:
                category = e.get("category") if isinstance(e.get("category"), str) else None
                live[e.get("addr")] = (e.get("frames") or [], _int(e.get("size")), category)
        elif action == "free_completed" and i <= peak_i:
            live.pop(e.get("addr"), None)
    before = [
        _int(b.get("size")) for b in live_blocks if b.get("address") not in allocated_in_history
    ]
    return live, before


def _timeline(
    times: np.ndarray, allocated: np.ndarray, peak_i: int
) -> tuple[tuple[float, ...], tuple[int, ...], int]:
    """At most MAX_TIMELINE_POINTS points; each keeps its bucket's maximum so that the peak
    survives the downsampling."""
    n = allocated.size
    if np.isfinite(times).all() and n:
        t = (times - times[0]) / 1e6
    else:
        t = np.arange(n, dtype=np.float64)  # no timestamps: event index as the time axis
    if n <= MAX_TIMELINE_POINTS:
        return tuple(t.tolist()), tuple(int(x) for x in allocated.tolist()), peak_i
    edges = np.linspace(0, n, MAX_TIMELINE_POINTS + 1).astype(np.int64)
    maxima = np.maximum.reduceat(allocated, edges[:-1])
    bucket_t = t[edges[:-1]]
    peak_bucket = int(np.searchsorted(edges, peak_i, side="right") - 1)
    return (
        tuple(bucket_t.tolist()),
        tuple(int(x) for x in maxima.tolist()),
        peak_bucket,
    )


def _user_frame(frames: list[Any], user: UserCode) -> dict[str, Any] | None:
    for f in frames:
        if isinstance(f, dict) and user.is_user_file(str(f.get("filename", ""))):
            return f
    return None


def _sites(
    blocks: list[tuple[list[Any], int]], total: int, user: UserCode, top: int
) -> tuple[AllocationSite, ...]:
    by_site: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for frames, size in blocks:
        f = _user_frame(frames, user)
        if f is None:
            continue
        key = (
            user.display(str(f.get("filename", ""))),
            _int(f.get("line")),
            str(f.get("name", "")),
        )
        by_site[key].append(size)
    ranked = sorted(by_site.items(), key=lambda kv: -sum(kv[1]))[:top]
    return tuple(
        AllocationSite(
            SourceLocation(
                file, line, func, share=sum(sizes) / total if total else None, count=len(sizes)
            ),
            bytes=sum(sizes),
            blocks=len(sizes),
        )
        for (file, line, func), sizes in ranked
    )


def _category(frames: list[Any]) -> str:
    if not frames:
        # On CUDA, backward runs in the autograd engine's device threads, which have no
        # Python stack; in a history that records stacks, that is where stackless blocks
        # come from.
        return "gradients"
    files = [str(f.get("filename", "")).replace("\\", "/") for f in frames if isinstance(f, dict)]
    names = [str(f.get("name", "")) for f in frames if isinstance(f, dict)]
    if any("torch/optim/" in f for f in files):
        return "optimizer_state"
    if (
        any("torch/autograd/" in f for f in files)
        or any(
            f.endswith("torch/_tensor.py") and n == "backward"
            for f, n in zip(files, names, strict=True)
        )
        or any("autograd::Engine" in n or "AccumulateGrad" in n for n in names)
    ):
        return "gradients"
    if any(
        "torch/nn/modules/" in f and n in ("forward", "_call_impl", "_wrapped_call_impl")
        for f, n in zip(files, names, strict=True)
    ):
        return "activations"
    if any(f.endswith(("torch/nn/parameter.py", "torch/nn/init.py")) for f in files) or any(
        "torch/nn/modules/module.py" in f and n in ("_apply", "to", "cuda", "convert")
        for f, n in zip(files, names, strict=True)
    ):
        return "parameters"
    return "other"


_PROFILER_CATEGORIES = {
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer_state",
    "activation": "activations",
}


def _categorize(blocks: list[tuple[list[Any], int, str | None]]) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for frames, size, given in blocks:
        cat = _PROFILER_CATEGORIES.get(given or "") or _category(frames)
        out[cat] += size
    return out
