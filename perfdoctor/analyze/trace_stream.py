"""Stream a trace file through the decoder in chunks, so memory stays bounded.

A trace is one JSON object (or, from some writers, a bare array of events) whose
`traceEvents` array holds nearly all of its bytes. The file is read (and gunzipped) in
blocks; once the array's opening bracket is found, the array body is cut at event
boundaries into chunks of about `chunk_bytes`, each decoded on its own as a JSON array of
events and handed to the sink before the next block is read. What is left at the end is
decoded together with the part before the array as one valid document, which also yields
the other top-level keys (deviceProperties, distributedInfo, ...), wherever they stand.

Cutting is safe by construction: a cut is taken at a `}` `,` `{` sequence (kineto writes
`},\n  {` between events; json.dump writes `}, {`) and accepted only if the piece decodes as
an array. A piece that ends inside a nested object or a string is not valid JSON, so a wrong
cut can never be accepted; an earlier candidate is tried, and failing that, the piece grows.
A file smaller than one chunk is decoded in one go, exactly as a whole-file decode.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import IO

import msgspec

from perfdoctor.analyze.trace_events import (
    DECODE_ERRORS,
    EVENTS_DECODER,
    TRACE_DECODER,
    EventBuilder,
)
from perfdoctor.errors import CorruptArtifact

CHUNK_BYTES = 32 << 20
# The key and the array's opening bracket; an escaped quote before it means it sits inside
# a string value.
_EVENTS_KEY = re.compile(rb'(?<!\\)"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_CUT_TRIES = 16  # earlier candidates tried before a piece is grown
_READ_IO_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)


def _open(path: Path) -> IO[bytes]:
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    if path.name.endswith(".gz") or magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def stream_trace(path: Path, sink: EventBuilder, chunk_bytes: int | None = None) -> None:
    """Decode the trace at `path` into `sink`; CorruptArtifact when it is not a trace."""
    chunk = chunk_bytes or CHUNK_BYTES
    try:
        with _open(path) as fh:
            _stream(fh, sink, chunk, str(path))
    except _READ_IO_ERRORS as err:
        raise CorruptArtifact(f"cannot read trace {path}: {_one_line(err)}") from err


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _stream(fh: IO[bytes], sink: EventBuilder, chunk: int, name: str) -> None:
    buf = bytearray()
    head: bytes | None = None  # the document up to (not including) the array's "["
    grow_to = chunk
    while True:
        block = fh.read(chunk)
        if block:
            buf += block
        if head is None:
            head = _find_head(buf, eof=not block)
            if head is None:
                if block:
                    continue
                break
            del buf[: len(head)]  # buf now starts with the array's "["
        if not block:
            break
        if len(buf) >= grow_to:
            taken = _take_chunk(buf, sink, name)
            # After a failed cut the piece must grow before the next try.
            grow_to = chunk if taken else len(buf) + chunk
    _finish(bytes(head or b"") + bytes(buf), sink, name)


def _find_head(buf: bytearray, eof: bool) -> bytes | None:
    """The bytes before the events array, once known (None: read on)."""
    start = len(buf) - len(buf.lstrip())
    if start < len(buf) and buf[start : start + 1] == b"[":
        return bytes(buf[:start])  # a bare array of events
    match = _EVENTS_KEY.search(buf)
    if match is not None:
        return bytes(buf[: match.end() - 1])
    if eof:
        return None
    return None


def _take_chunk(buf: bytearray, sink: EventBuilder, name: str) -> bool:
    """Decode the longest leading run of whole events in buf ("[" + events + ", ...") and
    drop it from buf, leaving "[" + the rest. False when no cut decoded."""
    end = len(buf)
    for _ in range(_CUT_TRIES):
        cut = _last_cut(buf, end)
        if cut is None:
            return False
        close = cut + 1  # just after the event's "}"
        comma = buf.index(b",", close)
        piece = bytearray(buf[:close])
        piece += b"]"
        try:
            events = EVENTS_DECODER.decode(piece)
        except msgspec.ValidationError as err:
            # Well-formed JSON of the wrong shape: no cut can repair that.
            raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err
        except DECODE_ERRORS:
            end = cut  # a cut inside an event or a string: try an earlier one
            continue
        sink.add(events)
        del events, piece
        del buf[1 : comma + 1]
        return True
    return False


def _last_cut(buf: bytearray, end: int) -> int | None:
    """Position of the `}` of the last `}` `,` `{` sequence starting before `end`."""
    pos = end
    while True:
        pos = buf.rfind(b"}", 1, pos)
        if pos < 0:
            return None
        match = _CUT.match(buf, pos)
        if match is not None:
            return pos


def _finish(doc: bytes, sink: EventBuilder, name: str) -> None:
    try:
        decoded = TRACE_DECODER.decode(doc)
    except DECODE_ERRORS as err:
        raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err
    del doc
    if isinstance(decoded, list):
        sink.add(decoded)
        return
    if decoded.traceEvents is None:
        raise CorruptArtifact(f"unusable trace {name}: no traceEvents key")
    sink.add(decoded.traceEvents)
    sink.set_metadata(decoded)
