"""What a memory snapshot says about an allocation that failed, and whether its free cache
is fragmented or simply cached.

The allocator history (device_traces) records an `oom` entry when cudaMalloc failed even
after the allocator released its cached blocks: a real out-of-memory, with the request's
size and the device's free memory (`device_free`, from cudaMemGetInfo) at that moment. An
allocator retry (memory_stats num_alloc_retries) is the milder case: the cache was flushed
and the retry succeeded.

Free bytes in the cache are fragmentation only when they could not serve a request: the
cache held at least the failed request's size in free blocks, yet no free block was large
enough (split across segments or between live blocks). Without a failed request, free
cached memory is cached, reusable memory, not fragmentation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FailedRequest:
    size: int  # bytes requested
    device_free: int | None  # bytes free on the device when it failed


def last_oom(entries: Sequence[dict[str, Any]]) -> FailedRequest | None:
    """The last `oom` entry of one device's history (None without one)."""
    for e in reversed(entries):
        if e.get("action") == "oom":
            size = e.get("size")
            free = e.get("device_free")
            if isinstance(size, int) and not isinstance(size, bool):
                return FailedRequest(size, free if isinstance(free, int) else None)
    return None


def cache_fragmented(
    request: int | None, free_between_blocks: int, largest_free: int
) -> bool | None:
    """True: the cache's free blocks added up to the request but none held it; False: the
    largest free block could serve it, or the free bytes could not have anyway (not a
    fragmentation problem); None without a failed request to judge by."""
    if request is None:
        return None
    return free_between_blocks >= request > largest_free
