"""The failed request of a real out-of-memory, worded for the memory findings."""

from __future__ import annotations

from perfdoctor.model import Facts
from perfdoctor.rules.base import num
from perfdoctor.units import format_bytes


def oom_request_text(facts: Facts) -> str:
    """' (the last: a request of 5.3 GB with 95 MB free on the device)' or ''."""
    request = num(facts, "oom_request_bytes")
    if request is None:
        return ""
    free = num(facts, "oom_device_free_bytes")
    free_text = f" with {format_bytes(int(free))} free on the device" if free is not None else ""
    return f" (the last: a request of {format_bytes(int(request))}{free_text})"
