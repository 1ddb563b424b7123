"""How the memory figures are worded, once for the memory section and the step table: the
state at the snapshot versus a peak, a real out-of-memory versus an allocator retry, and
cached free memory versus fragmentation (analyze/memory_events.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfdoctor.render import format as fmt


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def has_history(summary: Mapping[str, Any]) -> bool:
    """False for a snapshot recorded without memory history: one state, no peak."""
    entries = summary.get("history_entries", summary.get("memory_history_entries"))
    return not (isinstance(entries, int) and entries == 0)


def allocated_label(summary: Mapping[str, Any]) -> str:
    return "peak allocated" if has_history(summary) else "allocated at the snapshot (no history)"


def reserved_label(summary: Mapping[str, Any]) -> str:
    return "peak reserved" if has_history(summary) else "reserved at the snapshot"


def unallocated_label(summary: Mapping[str, Any]) -> str:
    when = "at the peak" if has_history(summary) else "at the snapshot"
    return f"reserved, not allocated, {when}"


def failure_row(summary: Mapping[str, Any]) -> tuple[str, str] | None:
    """A real out-of-memory with its failed request, or the allocator's retries."""
    request = _num(summary.get("oom_request_bytes"))
    free = _num(summary.get("oom_device_free_bytes"))
    ooms = _num(summary.get("oom_events"))
    retries = _num(summary.get("alloc_retries"))
    if request is not None:
        free_text = f" with {fmt.nbytes(free)} free on the device" if free is not None else ""
        return (
            "out of memory",
            f"a request of {fmt.nbytes(request)} failed{free_text} (cudaMalloc failed even "
            "after the allocator released its cache)",
        )
    if ooms:
        return ("out of memory", f"{ooms:.0f} time(s) (the failed request's size is not recorded)")
    if retries:
        return (
            "allocator retries",
            f"{retries:.0f} (it released its cache and retried cudaMalloc, which then "
            "succeeded: not an out-of-memory)",
        )
    return None


def fragmented(summary: Mapping[str, Any]) -> bool | None:
    """The failed request's verdict (analyze/memory_events.cache_fragmented), recomputed from
    the section's plain JSON."""
    request = _num(summary.get("oom_request_bytes"))
    free = _num(summary.get("free_bytes"))
    if request is None or free is None:
        return None
    between = free - (_num(summary.get("free_internal_bytes")) or 0.0)
    largest = _num(summary.get("largest_free_block_bytes")) or 0.0
    return between >= request > largest


def cached_free_verdict(summary: Mapping[str, Any]) -> str:
    """What the free bytes in the cache are, in words."""
    verdict = fragmented(summary)
    if verdict:
        return (
            "fragmented: the free blocks add up to the failed request but none holds it "
            "(expandable_segments lets segments grow instead)"
        )
    if verdict is False:
        return "cached, reusable: the failed request did not fit in the free blocks' total"
    return "cached, reusable (no failed request shows fragmentation)"


def step_table_row(facts: Mapping[str, Any]) -> tuple[str, str] | None:
    """The step table's row for the free part of the reservation: 'fragmentation' only when
    a failed request shows it, otherwise the cached, reusable share."""
    frag = facts.get("fragmentation_frac")
    if not isinstance(frag, float):
        return None
    when = "at the peak" if has_history(facts) else "at the snapshot"
    if facts.get("memory_cache_fragmented") is True:
        return ("fragmentation", f"{fmt.percent(frag)} of reserved, {when}")
    return ("cached, not allocated", f"{fmt.percent(frag)} of reserved, {when}")
