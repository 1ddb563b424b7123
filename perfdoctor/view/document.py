"""The trace document the viewer is served: the file's own JSON with perfdoctor's marker
events spliced in at the head of its event array. The bytes on disk are never changed, and
the trace is not re-encoded: only the array's opening bracket is found and our events go
right after it, so a trace of any size costs one copy and no parse here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from perfdoctor.errors import CorruptArtifact

# The key and the array's opening bracket; an escaped quote before it means it sits inside
# a string value (as in analyze/trace_stream.py).
_EVENTS_KEY = re.compile(rb'(?<!\\)"traceEvents"\s*:\s*\[')
_WHITESPACE = b" \t\r\n"


def splice_events(trace: bytes, events: Sequence[dict[str, Any]], name: str = "trace") -> bytes:
    """`trace` (a JSON object with "traceEvents", or a bare array of events) with `events`
    first in its event array. CorruptArtifact when no event array is found (checked also
    with nothing to add: the viewer would only say "import failed")."""
    start = _array_start(trace, name)
    if not events:
        return trace
    body = json.dumps(list(events), separators=(",", ":"), allow_nan=False).encode()[1:-1]
    rest = trace[start:].lstrip(_WHITESPACE)
    joiner = b"" if rest.startswith(b"]") else b","
    return trace[:start] + body + joiner + trace[start:]


def _array_start(trace: bytes, name: str) -> int:
    """Offset just after the event array's opening bracket."""
    head = trace.lstrip(_WHITESPACE)
    if head.startswith(b"\xef\xbb\xbf"):  # a BOM: JSON.parse refuses it anyway
        raise CorruptArtifact(f"{name}: a byte-order mark before the JSON")
    if head.startswith(b"["):
        return len(trace) - len(head) + 1
    found = _EVENTS_KEY.search(trace)
    if not head.startswith(b"{") or found is None:
        raise CorruptArtifact(f"{name} is not a trace: no traceEvents array")
    return found.end()
