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

Memory (issue 25 item 1): a broken file fails at the first piece that shows it is broken, not
after the whole file has been read (every wrong cut of a valid file is a valid prefix, which
msgspec reports as truncated, so any other decode error is in the data itself); the search
for the array reads on only while what was read is a valid prefix; and the columns kept may
not outgrow the bytes read (trace_budget.py), which refuses degenerate files of tiny events.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from pathlib import Path
from typing import IO

import msgspec

from perfdoctor.analyze.trace_budget import check_retained
from perfdoctor.analyze.trace_events import (
    DECODE_ERRORS,
    EVENTS_DECODER,
    TRACE_DECODER,
    EventBuilder,
)
from perfdoctor.errors import CorruptArtifact

CHUNK_BYTES = 32 << 20
# Events decoded in one piece at most: their structs (about 100-200 bytes each, whatever
# the event's size in the file) are what a piece costs. Real events (150-600 bytes) fill
# CHUNK_BYTES with fewer than this.
EVENTS_PER_PIECE = 200_000
_MIN_PIECE = 1 << 20
# The key and the array's opening bracket; an escaped quote before it means it sits inside
# a string value.
_EVENTS_KEY = re.compile(rb'(?<!\\)"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_CUT_TRIES = 16  # earlier candidates tried before a piece is grown
# msgspec names the offset of a decode error, except for an input that ended early.
_TRAILING = "trailing characters"
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
# The longest text _EVENTS_KEY can match across two reads without whitespace games; a
# search of new data starts this far back so a key cut by a read boundary is still found.
_KEY_OVERLAP = 64
_FIRST_READ = 64 << 10
_READ_IO_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)


# The decompressed-size budget of a gzipped trace: this many times its size on disk, and
# never less than the floor. The columns kept are held to the bytes read (trace_budget.py),
# but the parse of ordinary events still costs ~0.8x of them, so a 4 MB gzip bomb of
# repeated kernel events (1000:1) reached 4.2 GB. Real traces decompress 7.5-21x (the 24
# gzipped traces of the GPU corpus); any file within the floor is accepted whatever its ratio.
GZIP_RATIO_MAX = 100
GZIP_FLOOR_BYTES = 256 << 20


def gzip_budget(compressed_bytes: int) -> int:
    """The most decompressed bytes a gzipped trace of this size may hold."""
    return max(GZIP_FLOOR_BYTES, GZIP_RATIO_MAX * compressed_bytes)


class _Gunzip:
    """readinto() over a gzip file, by zlib directly: about twice as fast as GzipFile, which
    checks the CRC in a second pass over the output. Members are concatenated, as gunzip
    does; zero padding after the last one is ignored. Past gzip_budget() of the file's size
    it refuses to read on (CorruptArtifact)."""

    _IN = 1 << 20

    def __init__(self, raw: IO[bytes], name: str = "") -> None:
        self.raw = raw
        self.z = zlib.decompressobj(wbits=31)
        self.name = name
        try:
            self.compressed = os.fstat(raw.fileno()).st_size
        except (OSError, AttributeError, io.UnsupportedOperation):
            self.compressed = 0
        self.budget = gzip_budget(self.compressed)
        self.out = 0

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
        self.out += got
        if self.out > self.budget:
            raise CorruptArtifact(
                f"refused trace {self.name}: it decompresses to more than "
                f"{self.budget / 2**20:,.0f} MiB, {self.out / max(self.compressed, 1):,.0f}x "
                f"its {self.compressed / 2**20:,.1f} MiB on disk (profiler traces are 7-21x, "
                f"the budget {GZIP_RATIO_MAX}x or {GZIP_FLOOR_BYTES >> 20} MiB): a gzip bomb"
            )
        return got


def _open(path: Path) -> io.BufferedReader | _Gunzip:
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    if path.name.endswith(".gz") or magic == b"\x1f\x8b":
        return _Gunzip(raw, str(path))
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
    piece = chunk  # bytes of one decoded piece: fewer for tiny events (_piece_bytes)
    grow_to = chunk  # buffered bytes that start the decoding
    read = min(chunk, _FIRST_READ)
    searched = 0  # buf[:searched] holds no events key
    lead = False  # the document's first character has been seen
    check_at = _FIRST_READ  # while no key is found, the prefix is validated at doublings
    consumed = 0  # decompressed bytes read: the budget of the columns kept
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
        consumed += got
        read = min(chunk, 2 * read)
        if head is None:
            head, lead = _find_head(buf, searched, n, lead)
            if head is None:
                searched = max(0, n - _KEY_OVERLAP)
                if got and n >= check_at:
                    # Reading on is only worth it while this can still become a trace.
                    _check_prefix(memoryview(buf)[:n], TRACE_DECODER, name)
                    check_at = 2 * n
                if got:
                    continue
                break
            start = len(head)
        # Decode what is buffered piece by piece; at the end of the file, all but the last
        # piece, which _finish decodes with the rest of the document.
        while n - start >= grow_to:
            before = sink.events_seen
            taken = _take_chunks(buf, start, min(n, start + piece), n, sink, name)
            if taken == start:
                # No cut decoded: the piece doubles before the next try, so the decodes of
                # an uncuttable piece (one huge event) cost about twice its size in all.
                _check_prefix(memoryview(buf)[start:n], EVENTS_DECODER, name)
                piece = grow_to = 2 * (n - start)
                break
            check_retained(sink, consumed, name)
            piece = grow_to = _piece_bytes(taken - start, sink.events_seen - before, chunk)
            start = taken
        if not got:
            break
    _finish(_document(buf, head, start, n), sink, name)
    check_retained(sink, consumed, name)


def _piece_bytes(size: int, events: int, chunk: int) -> int:
    """The next piece's size from the last one's bytes per event: about EVENTS_PER_PIECE
    events, so the structs decoded at once stay bounded however small the events are (a
    32 MB piece of 18-byte events decoded into 270 MB of structs)."""
    per_event = size / max(events, 1)
    return int(min(chunk, max(min(_MIN_PIECE, chunk), EVENTS_PER_PIECE * per_event)))


def _document(buf: bytearray, head: bytes | None, start: int, n: int) -> bytearray:
    """head + buf[start:n], made in buf itself: the rest can be most of a file (a file
    without the key, or one that never cut), so it is not copied."""
    del buf[n:]
    del buf[:start]
    if head:
        buf[0:0] = head
    return buf


def _check_prefix(data: memoryview, decoder: msgspec.json.Decoder, name: str) -> None:
    """CorruptArtifact if `data` is not the start of a valid document for `decoder`. For
    the events array, what follows its "]" is the rest of the document: not checked here."""
    try:
        decoder.decode(data)
    except msgspec.DecodeError as err:
        if decoder is EVENTS_DECODER and _TRAILING in str(err):
            return
        # A number cut by the end of the data is "invalid number (byte <its end>)".
        if _error_byte(err) < len(data):
            raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err
    except DECODE_ERRORS as err:
        raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err


_NON_SPACE = re.compile(rb"\S")


def _find_head(buf: bytearray, searched: int, n: int, lead: bool) -> tuple[bytes | None, bool]:
    """(the bytes before the events array, or None: read on; whether the document's first
    character has been seen). Only buf[searched:n] is new: searching the whole buffer on
    every read made a file without the key quadratic. Before the first character is seen,
    buf[:searched] is whitespace."""
    if not lead:
        first = _NON_SPACE.search(buf, searched, n)
        if first is not None:
            lead = True
            if buf[first.start()] == 0x5B:  # "[": a bare array of events
                return bytes(buf[: first.start()]), lead
    match = _EVENTS_KEY.search(buf, searched, n)
    if match is not None:
        return bytes(buf[: match.end() - 1]), lead
    return None, lead


def _take_chunks(
    buf: bytearray, start: int, end: int, n: int, sink: EventBuilder, name: str
) -> int:
    """Decode the longest run of whole events in buf[start:end] ("[" + events + ", ...") and
    return where the rest starts (its "[" is the comma after the last decoded event; start
    when no cut decoded). The piece is decoded in place: the comma after its last event is
    briefly turned into "]", then into the "[" of the next piece, so nothing is copied.
    Nothing decoded may keep a slice of buf past sink.add (the buffer is reused)."""
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
        except DECODE_ERRORS as err:
            buf[comma] = 0x2C  # ","
            if _in_the_data(err, comma - start):
                raise CorruptArtifact(f"corrupt trace {name}: {_one_line(err)}") from err
            end = cut  # a cut inside an event or a string: try an earlier one
            continue
        buf[comma] = 0x5B  # "["
        sink.add(events)
        return comma
    return start


def _in_the_data(err: BaseException, closer: int) -> bool:
    """Whether a failed decode of a piece whose "]" we wrote at offset `closer` shows an
    error in the file itself. The bytes before a cut are a valid prefix whenever the file
    is valid, and a wrong cut (inside a string, or inside an array, which our "]" closes)
    leaves the decoder wanting more: msgspec says "truncated". Any other error at a byte
    before our "]" cannot come from the cut."""
    if isinstance(err, msgspec.DecodeError):
        # "trailing characters": the events array ended before the cut, which fell in a
        # later key (deviceProperties after traceEvents): an earlier cut will do.
        return _TRAILING not in str(err) and _error_byte(err) < closer
    return isinstance(err, UnicodeDecodeError | RecursionError)


def _error_byte(err: msgspec.DecodeError) -> float:
    """The offset a decode error names; infinity for "truncated" (or a message without
    one), which the end of the data explains."""
    at = _AT_BYTE.search(str(err))
    return float("inf") if at is None else int(at.group(1))


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


def _finish(doc: bytes | bytearray, sink: EventBuilder, name: str) -> None:
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
