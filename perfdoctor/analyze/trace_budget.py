"""The memory a parsed trace may keep, relative to the bytes it was read from (issue 25 item 1).

The parser keeps a few numeric columns per event of interest (36-80 bytes), one string per
distinct name, and the 'B' events still waiting for their 'E'. A profiler writes events of
150-600 bytes (args, ids, names), so on every real trace the columns are a small fraction of
the decompressed file (0.05-0.33x on the 24 real traces of the GPU corpus and the recorded
fixtures; tests/unit/analyze/test_trace_memory.py checks them). A degenerate or hostile
file of tiny events (`{"ph":"B"}` repeated, or a distinct name per 40-byte event) makes them
outgrow the file itself: 2-9x was measured, and a 10 MB .gz can hold 1-10 GB of such events.
Such a trace is refused with one line once what is kept exceeds 0.75x the file's bytes read
so far, past a floor below which any trace is accepted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfdoctor.errors import CorruptArtifact

if TYPE_CHECKING:
    from perfdoctor.analyze.trace_events import EventBuilder

# What is kept may reach this multiple of the decompressed bytes read: over twice the most
# a real trace keeps (0.33x), and low enough that the parse, with one piece's structs and
# the joining of the columns on top, peaks below 2x the file.
RETAINED_RATIO_MAX = 0.75
# Below this much kept, any trace is accepted: small traces are never refused, whatever
# their events look like.
RETAINED_FLOOR_BYTES = 256 << 20
# Python-side cost of one distinct name (str object + dict slot + the codes list) beyond
# its characters, and of one 'B' event waiting for its 'E' (struct, args, list slot).
NAME_OVERHEAD_BYTES = 110
OPEN_SPAN_BYTES = 250
SHAPE_ENTRY_BYTES = 400


def retained_bytes(builder: EventBuilder) -> int:
    """An estimate of what the builder keeps: column arrays exactly, Python objects by
    count."""
    total = sum(columns.nbytes for columns in builder.all_columns())
    total += builder.names_bytes + NAME_OVERHEAD_BYTES * len(builder.names.index)
    total += NAME_OVERHEAD_BYTES * len(builder.tids.index)
    total += OPEN_SPAN_BYTES * sum(len(stack) for stack in builder.open_spans.values())
    total += SHAPE_ENTRY_BYTES * len(builder.shapes)
    return total


def check_retained(builder: EventBuilder, bytes_read: int, name: str) -> None:
    """CorruptArtifact when the parse keeps more than the file it was read from."""
    kept = retained_bytes(builder)
    if kept <= RETAINED_FLOOR_BYTES or kept <= RETAINED_RATIO_MAX * bytes_read:
        return
    events = builder.events_seen
    per_event = bytes_read / events if events else float(bytes_read)
    raise CorruptArtifact(
        f"refused trace {name}: its {events:,} events average {per_event:.0f} bytes, too "
        f"small for a profiler's (150-600); parsing it would keep {kept / 2**20:,.0f} MiB "
        f"for {bytes_read / 2**20:,.0f} MiB of trace"
    )
