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
import io
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
_FIRST_READ = 64 << 10
_READ_IO_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)


class _Gunzip:
    """readinto() over a gzip file, by zlib directly: about twice as fast as GzipFile, which
    checks the CRC in a second pass over the output. Members are concatenated, as gunzip
    does; zero padding after the last one is ignored."""

    _IN = 1 << 20

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.z = zlib.decompressobj(wbits=31)

    def __enter__(self) -> _Gunzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.close()

    def readinto(self, out: memoryview) -> int:
        got, want = 0, len(out)
        while got < want:
            z = self.z
            if z.eof:  # checked first: at the end, unconsumed_tail repeats unused_data
                data = z.unused_data or self.raw.read(self._IN)
                if not data.strip(b"\x00"):
                    break  # the end (or zero padding)
                self.z = z = zlib.decompressobj(wbits=31)
            elif z.unconsumed_tail:
                data = z.unconsumed_tail
            else:
                data = self.raw.read(self._IN)
                if not data:
                    raise EOFError("compressed file ended before the end-of-stream marker")
            chunk = z.decompress(data, want - got)
            out[got : got + len(chunk)] = chunk
            got += len(chunk)
        return got


def _open(path: Path) -> io.BufferedReader | _Gunzip:
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    if path.name.endswith(".gz") or magic == b"\x1f\x8b":
        return _Gunzip(raw)
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


def _stream(fh: io.BufferedReader | _Gunzip, sink: EventBuilder, chunk: int, name: str) -> None:
    # One buffer, reused: the data is buf[:n]. Reading into it (instead of allocating a block
    # per read and appending it) saves a copy and the page faults of fresh memory. Reads
    # start small and double up to `chunk`, so the buffer grows with the file: a small trace
    # does not pay for zeroing a buffer of twice the chunk size (64 MiB, about 50 ms).
    buf = bytearray()
    n = 0
    head: bytes | None = None  # the document up to (not including) the array's "["
    start = 0  # buf[start] is the "[" that opens the next piece
    grow_to = chunk
    read = min(chunk, _FIRST_READ)
    while True:
        if start:
            # Move the undecoded rest to the front (same length: the buffer is not resized).
            rest = n - start
            buf[:rest] = buf[start:n]
            n, start = rest, 0
        if len(buf) - n < read:
            buf.extend(bytes(read - (len(buf) - n)))
        got = fh.readinto(memoryview(buf)[n : n + read])
        n += got
        read = min(chunk, 2 * read)
        if head is None:
            head = _find_head(buf, n)
            if head is None:
                if got:
                    continue
                break
            start = len(head)
        if not got:
            break
        if n - start >= grow_to:
            taken = _take_chunks(buf, start, n, sink, name)
            # After a failed cut the piece must grow before the next try.
            grow_to = chunk if taken > start else n - start + chunk
            start = taken
    _finish(bytes(head or b"") + bytes(buf[start:n]), sink, name)


_NON_SPACE = re.compile(rb"\S")


def _find_head(buf: bytearray, n: int) -> bytes | None:
    """The bytes before the events array, once known (None: read on)."""
    first = _NON_SPACE.search(buf, 0, n)
    if first is not None and buf[first.start()] == 0x5B:  # "[": a bare array of events
        return bytes(buf[: first.start()])
    match = _EVENTS_KEY.search(buf, 0, n)
    if match is not None:
        return bytes(buf[: match.end() - 1])
    return None


def _take_chunks(buf: bytearray, start: int, n: int, sink: EventBuilder, name: str) -> int:
    """Decode the longest run of whole events in buf[start:n] ("[" + events + ", ...") and
    return where the rest starts (its "[" is the comma after the last decoded event; start
    when no cut decoded). The piece is decoded in place: the comma after its last event is
    briefly turned into "]", then into the "[" of the next piece, so nothing is copied.
    Nothing decoded may keep a slice of buf past sink.add (the buffer is reused)."""
    end = n
    for _ in range(_CUT_TRIES):
        cut = _last_cut(buf, start, end, n)
        if cut is None:
            return start
        comma = buf.index(b",", cut + 1, n)
        buf[comma] = 0x5D  # "]"
        try:
            events = EVENTS_DECODER.decode(memoryview(buf)[start : comma + 1])
        except msgspec.ValidationError as err:
            # Well-formed JSON of the wrong shape: no cut can repair that.
            raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err
        except DECODE_ERRORS:
            buf[comma] = 0x2C  # ","
            end = cut  # a cut inside an event or a string: try an earlier one
            continue
        buf[comma] = 0x5B  # "["
        sink.add(events)
        return comma
    return start


def _last_cut(buf: bytearray, start: int, end: int, n: int) -> int | None:
    """Position of the `}` of the last `}` `,` `{` sequence in buf[start + 1 : n] whose `}`
    is before `end`."""
    pos = end
    while True:
        pos = buf.rfind(b"}", start + 1, pos)
        if pos < 0:
            return None
        match = _CUT.match(buf, pos, n)
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
