"""The failed request of a real out-of-memory, worded for the memory findings."""

from __future__ import annotations

from perfdoctor.model import Facts
from perfdoctor.rules.base import num, text
from perfdoctor.units import format_bytes


def device_text(facts: Facts) -> str:
    """' on device 1' when the snapshot held several devices, '' otherwise."""
    device = num(facts, "memory_device")
    devices = num(facts, "memory_devices")
    if device is None or not devices or devices < 2:
        return ""
    return f" on device {device:.0f}"


def other_devices_text(facts: Facts) -> str:
    """' Devices 0 and 2 of the snapshot had no out-of-memory (peaks ...).' or ''."""
    others = text(facts, "memory_other_devices")
    return f" The snapshot's other devices: {others}." if others else ""


def oom_request_text(facts: Facts) -> str:
    """' (the last: a request of 5.3 GB with 95 MB free on the device)' or ''."""
    request = num(facts, "oom_request_bytes")
    if request is None:
        return ""
    free = num(facts, "oom_device_free_bytes")
    free_text = f" with {format_bytes(int(free))} free on the device" if free is not None else ""
    return f" (the last: a request of {format_bytes(int(request))}{free_text})"
