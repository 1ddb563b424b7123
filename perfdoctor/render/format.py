"""Number and label formatting shared by every renderer, so all reports read the same.

Every function takes a possibly-missing value and returns text; a missing value ("not
measured") is always shown as an em dash, never as "None" or "nan".
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from typing import Any, TypeVar

from perfdoctor.model import AppliedOptimization, Evidence, Scalar, SourceLocation
from perfdoctor.units import format_bytes

MISSING = "—"


# The terminal's colour of each severity, in the report and in `perfdoctor compare`.
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _is_missing(value: float | int | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def number(value: float | int | None, digits: int = 3) -> str:
    """`digits` significant digits, no scientific notation for everyday magnitudes."""
    if _is_missing(value):
        return MISSING
    assert value is not None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 6 or magnitude <= -4:
        return f"{value:.{digits - 1}e}"
    decimals = max(digits - 1 - magnitude, 0)
    return f"{value:,.{decimals}f}"


def ms(value: float | None) -> str:
    if _is_missing(value):
        return MISSING
    assert value is not None
    return f"{number(value)} ms"


def seconds(value: float | None) -> str:
    if _is_missing(value):
        return MISSING
    assert value is not None
    return f"{number(value)} s"


def percent(frac: float | None, digits: int = 1) -> str:
    if _is_missing(frac):
        return MISSING
    assert frac is not None
    return f"{frac * 100:.{digits}f}%"


def signed_percent(frac: float | None, digits: int = 2) -> str:
    if _is_missing(frac):
        return MISSING
    assert frac is not None
    return f"{frac * 100:+.{digits}f}%"


def nbytes(value: float | int | None) -> str:
    """units.format_bytes, the one byte formatter, or the missing mark."""
    if _is_missing(value):
        return MISSING
    assert value is not None
    return format_bytes(value)


def speedup(value: float | None, noise: float | None = None) -> str:
    if _is_missing(value):
        return MISSING
    assert value is not None
    text = f"{value:.2f}x"
    if not _is_missing(noise):
        assert noise is not None
        text += f" ± {noise:.2f}"
    return text


def throughput(value: float | None) -> str:
    if _is_missing(value):
        return MISSING
    assert value is not None
    return f"{number(value)} samples/s"


def scalar(value: Scalar, unit: str = "") -> str:
    """A fact or evidence value as a person reads it ("62.3%" for fractions is the caller's
    choice: the unit string decides, and `frac`/`%` get percentages)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if unit in ("frac", "fraction"):
        return percent(float(value))
    if unit == "bytes":
        return nbytes(value)
    text = number(value)
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "x") else f"{text} {unit}"


def unit_for(name: str, unit: str = "") -> str:
    """The unit a rule gave, else the one the fact's name carries (fact names end in their
    unit: `_frac`, `_bytes`, `_ms`, see analyze/fact_catalog.py)."""
    if unit:
        return unit
    parts = name.split("_")
    for token, implied in (("frac", "frac"), ("bytes", "bytes"), ("ms", "ms")):
        if token in parts:
            return implied
    return ""


def evidence(item: Evidence) -> str:
    """`data_wait_frac = 62.3% (> 10.0%)`: the measured value and the threshold it crossed."""
    unit = unit_for(item.name, item.unit)
    text = f"{item.name} = {scalar(item.value, unit)}"
    if item.threshold is not None:
        text += f" ({item.comparison or 'vs'} {scalar(item.threshold, unit)})"
    if item.note:
        text += f"; {item.note}"
    return text


def location(loc: SourceLocation) -> str:
    text = str(loc)
    extras = []
    if loc.share is not None:
        extras.append(f"{percent(loc.share)} of the time")
    if loc.count is not None:
        extras.append(f"{number(loc.count)}x")
    return f"{text} [{', '.join(extras)}]" if extras else text


def applied(
    items: tuple[AppliedOptimization, ...], fallback: tuple[str, ...], label: str = ""
) -> str:
    """What the child actually did: ✓ applied and verified, ? applied but unverified,
    ✗ refused. When the child reported nothing, the requested ids are shown as they are.
    A variant named after its single optimization gets the mark and a word, not the id again.
    """
    if not items:
        return ", ".join(fallback) or MISSING
    if len(items) == 1 and items[0].id == label:
        item = items[0]
        if item.applied and item.verified:
            return "✓ applied"
        return "? unverified" if item.applied else "✗ refused"
    marks = []
    for item in items:
        mark = "✓" if item.applied and item.verified else "?" if item.applied else "✗"
        marks.append(f"{mark} {item.id}")
    return ", ".join(marks)


# Control characters a terminal acts on: C0 (but newline and tab, which layout needs), DEL,
# C1 (0x9b is a one-byte CSI on some terminals). Names of kernels, devices, files and frames
# come from traces and snapshots other people hand over: `ESC[2J` in a kernel name would
# clear the user's screen, `ESC]0;...` retitle it, when printed raw.
# C0/C1 controls but newline and tab; and the bidirectional controls (U+202E RIGHT-TO-LEFT
# OVERRIDE and its kin, U+061C, U+200E/F, U+2066-2069): in a name or path they reorder what
# a terminal or browser shows ("Trojan Source"), so they are shown escaped too.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

T = TypeVar("T")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character but newline and tab shown escaped (`\\x1b`), the
    bidirectional controls too (`\\u202e`)."""
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


def printable_all(value: T) -> T:
    """`value` (a Report, a comparison, any dataclass, container or string) with `printable`
    applied to every string in it, keys included; unchanged parts are the same objects, so a
    report without control characters costs one walk and no copy."""
    return _printable(value)  # type: ignore[no-any-return]


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        items = [_printable(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):
        pairs = [(_printable(k), _printable(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return type(value)(pairs) if type(value) is dict else dict(pairs)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _printable(old)
            if new is not old:
                changed[f.name] = new
        if not changed:
            return value
        out = copy.copy(value)
        for name, new in changed.items():
            object.__setattr__(out, name, new)  # frozen dataclasses too
        return out
    return value


def one_line(text: str, limit: int = 0) -> str:
    """Collapse whitespace (script output can carry newlines and tabs), show control
    characters escaped, and optionally clip."""
    flat = printable(" ".join(text.split()))
    if limit and len(flat) > limit:
        return flat[: max(limit - 1, 0)] + "…"
    return flat
