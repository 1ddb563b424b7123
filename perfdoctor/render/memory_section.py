"""The memory section every renderer shows when a CUDA memory snapshot was analysed: the
peaks, what the peak holds, where it was allocated, and how fragmented the cache is.

Built from `report.series["memory"][label]["summary"]` (analyze/memory.py `memory_series`),
plain JSON, so a report read back from report.json renders the same section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.model import Report
from perfdoctor.render import format as fmt
from perfdoctor.render import memory_wording as wording
from perfdoctor.rundir import BASELINE_LABEL

_CATEGORY_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations",
    "autocast_copies": "autocast dtype copies (cached weights, cast activations)",
    "other": "other (inputs, user tensors)",
    "unknown": "unknown (allocated before recording began; usually the parameters)",
}
CATEGORY_NOTE = (
    "Split by each live block's allocation stack: optimizer state under torch/optim "
    "(step, _init_group), gradients under backward (autograd engine, run_backward), "
    "activations under a module's forward, autocast copies under autocast's cached_cast, "
    "parameters under Module.__init__/to/cuda; "
    "blocks with no recorded allocation are unknown."
)
_SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class SiteRow:
    site: str  # file:line
    function: str
    size: str
    share: str
    blocks: str

    def cells(self) -> tuple[str, str, str, str]:
        """The cells after the site: function, bytes, share, blocks."""
        return (self.function, self.size, self.share, self.blocks)


@dataclass(frozen=True)
class MemorySection:
    label: str
    figures: tuple[tuple[str, str], ...]  # (measure, value)
    categories: tuple[tuple[str, str, str], ...]  # (what, bytes, share of the peak)
    sites_at_peak: tuple[SiteRow, ...]
    sites_overall: tuple[SiteRow, ...]
    overall_total: str
    timeline: tuple[int, ...]  # allocated bytes, downsampled (for a sparkline)


def memory_section(report: Report) -> MemorySection | None:
    group = (report.series or {}).get("memory")
    if not isinstance(group, Mapping):
        return None
    labels = sorted(group, key=lambda k: k != BASELINE_LABEL)
    for label in labels:
        row = group[label]
        if isinstance(row, Mapping) and isinstance(row.get("summary"), Mapping):
            return _section(str(label), row, row["summary"])
    return None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _section(label: str, row: Mapping[str, Any], s: Mapping[str, Any]) -> MemorySection:
    peak = _num(s.get("peak_allocated_bytes"))
    reserved_at_peak = _num(s.get("reserved_at_peak_bytes"))
    when = ""
    if _num(s.get("peak_time_s")) is not None:
        when = f" at {s['peak_time_s']:.3f} s into the history"
    if isinstance(s.get("peak_during"), str):
        when += f", during {s['peak_during']}"
    figures: list[tuple[str, str]] = [
        (wording.allocated_label(s), f"{fmt.nbytes(peak)}{when}"),
        (wording.reserved_label(s), fmt.nbytes(_num(s.get("peak_reserved_bytes")))),
    ]
    if peak is not None and reserved_at_peak:
        gap = max(reserved_at_peak - peak, 0.0)
        figures.append(
            (
                wording.unallocated_label(s),
                f"{fmt.nbytes(gap)} ({fmt.percent(gap / reserved_at_peak)} of reserved)",
            )
        )
    free = _num(s.get("free_bytes"))
    if free is not None:
        internal = _num(s.get("free_internal_bytes")) or 0.0
        largest = _num(s.get("largest_free_block_bytes")) or 0.0
        external = free - internal
        largest_share = (
            f" ({fmt.percent(largest / external)} of the free bytes between blocks)"
            if external > 0
            else ""
        )
        figures.append(
            (
                "free in the cache at the snapshot",
                f"{fmt.nbytes(free)} in {s.get('segments', '?')} segments, "
                f"{fmt.nbytes(internal)} of it rounding inside blocks; "
                + wording.cached_free_verdict(s),
            )
        )
        figures.append(("largest free block", f"{fmt.nbytes(largest)}{largest_share}"))
    failure = wording.failure_row(s)
    if failure is not None:
        figures.append(failure)
    others = s.get("other_devices")
    if isinstance(others, list) and others:
        # A snapshot covers every device the process used: say which one these figures are
        # of, and what the others held.
        of = f"{s.get('device', '?')} (of {len(others) + 1} in the snapshot)"
        figures.insert(0, ("device", of))
        for o in others:
            if not isinstance(o, Mapping):
                continue
            ooms = _num(o.get("oom_events")) or 0
            figures.append(
                (
                    f"device {o.get('device', '?')}",
                    f"peak {fmt.nbytes(_num(o.get('peak_allocated_bytes')))} allocated, "
                    f"{fmt.nbytes(_num(o.get('peak_reserved_bytes')))} reserved, "
                    + (f"{ooms:.0f} out-of-memory" if ooms else "no out-of-memory"),
                )
            )
    expandable = s.get("expandable_segments")
    if isinstance(expandable, bool):
        figures.append(("expandable_segments", "on" if expandable else "off"))
    if _num(s.get("history_entries")):
        figures.append(("allocator history", f"{int(s['history_entries']):,} entries"))

    cats = s.get("categories_at_peak")
    categories: list[tuple[str, str, str]] = []
    if isinstance(cats, Mapping) and cats:
        total = sum(v for v in cats.values() if isinstance(v, (int, float))) or 0
        for key, name in _CATEGORY_NAMES.items():
            value = _num(cats.get(key))
            if value:
                categories.append((name, fmt.nbytes(value), fmt.percent(value / total)))
    series = row.get("allocated_bytes")
    timeline = tuple(int(v) for v in series if _num(v) is not None) if series else ()
    return MemorySection(
        label=label,
        figures=tuple(figures),
        categories=tuple(categories),
        sites_at_peak=_sites(s.get("top_sites")),
        sites_overall=_sites(s.get("top_sites_overall")),
        overall_total=fmt.nbytes(_num(s.get("allocated_in_history_bytes"))),
        timeline=timeline,
    )


def _sites(raw: Any) -> tuple[SiteRow, ...]:
    if not isinstance(raw, Sequence):
        return ()
    rows = []
    for site in raw:
        if not isinstance(site, Mapping):
            continue
        share = _num(site.get("share"))
        rows.append(
            SiteRow(
                site=f"{site.get('file', '?')}:{site.get('line', '?')}",
                function=str(site.get("function", "")),
                size=fmt.nbytes(_num(site.get("bytes"))),
                share=fmt.percent(share) if share is not None else fmt.MISSING,
                blocks=str(site.get("blocks", "")),
            )
        )
    return tuple(rows)


def sparkline(values: Sequence[int], width: int = 48) -> str:
    """Allocated bytes as one line of block characters; each column keeps its maximum."""
    if not values:
        return ""
    n = len(values)
    cols = [
        max(values[i * n // width : max((i + 1) * n // width, i * n // width + 1)])
        for i in range(min(width, n))
    ]
    top = max(cols) or 1
    return "".join(
        _SPARK[min(int(v / top * (len(_SPARK) - 1) + 0.5), len(_SPARK) - 1)] for v in cols
    )
