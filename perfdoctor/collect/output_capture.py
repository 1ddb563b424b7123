"""Output capture: each of the child's pipes copied, raw, into its log file and, filtered, to
the terminal. The filter hides profiler chatter the script did not write (kept in the log),
and the last lines are kept for the manifest's error line.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import threading
from collections import deque
from pathlib import Path
from typing import IO

# Profiler chatter from kineto (mechanics §6.4); kept in stderr.log, hidden from the terminal.
_NOISE_PREFIX = b"USDT:"
# c10 warnings that our own profiler window causes, e.g. "[W1122 05:37:49.91 CPUAllocator.cpp:245]
# Memory block of unknown size was allocated before the profiling started ...". Lines that
# start like a c10 log line are held until complete, then dropped from the echo if they match.
_C10_LOG_START = b"[W"
# With a process group, c10 prefixes its lines with the rank: "[rank0]:[W1122 05:37:49 ...".
_RANK_PREFIX = re.compile(rb"\[rank\d+\]:")
_RANK_PREFIX_START = re.compile(rb"\[(?:r(?:a(?:n(?:k(?:\d+(?:\](?::)?)?)?)?)?)?)?")
_PROFILER_WARNINGS = (b"was allocated before the profiling started",)
_STDERR_TAIL_LINES = 40


class OutputTee(threading.Thread):
    """Copies one pipe of the child into a log file (raw) and to the terminal (filtered)."""

    def __init__(self, pipe: IO[bytes] | None, log_path: Path, echo: IO[str] | None) -> None:
        super().__init__(name=f"perfdoctor-tee-{log_path.stem}", daemon=True)
        self._pipe = pipe
        self._log_path = log_path
        self._echo = echo
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._partial = ""
        self._at_line_start = True
        self._held = b""  # the start of a line that may turn out to be profiler noise
        self._dropping = False

    @property
    def tail(self) -> tuple[str, ...]:
        """The last lines the script wrote on this pipe (profiler noise excluded)."""
        return (*self._lines, *([self._partial] if self._partial.strip() else []))

    def run(self) -> None:
        if self._pipe is None:
            return
        fd = self._pipe.fileno()
        try:
            log: IO[bytes] | None = self._log_path.open("wb")
        except OSError:  # the disk is already full: drain the pipe all the same, or the
            log = None  # child blocks on its next write
        try:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                if log is not None:
                    try:
                        log.write(chunk)
                        log.flush()
                    except OSError:  # the disk is full: keep draining the pipe
                        _closed(log)
                        log = None
                self._filter(chunk)
            if self._held:
                self._emit(self._held)
            self._emit(b"", final=True)
        finally:
            if log is not None:
                _closed(log)
        self._pipe.close()

    def _filter(self, chunk: bytes) -> None:
        for piece in chunk.splitlines(keepends=True):
            if self._at_line_start:
                piece = self._held + piece
                self._held = b""
                complete = piece.endswith((b"\n", b"\r"))
                ranked = _RANK_PREFIX.match(piece)
                probe = piece[ranked.end() :] if ranked else piece
                undecided = not complete and (
                    (len(piece) < len(_NOISE_PREFIX) and _NOISE_PREFIX.startswith(piece))
                    or probe.startswith(_C10_LOG_START)
                    or probe in (_C10_LOG_START[:1], b"")
                    or _RANK_PREFIX_START.fullmatch(piece) is not None
                )
                if undecided:
                    self._held = piece  # wait for more bytes of this line
                    continue
                self._dropping = piece.startswith(_NOISE_PREFIX) or (
                    probe.startswith(_C10_LOG_START)
                    and any(marker in probe for marker in _PROFILER_WARNINGS)
                )
            self._at_line_start = piece.endswith((b"\n", b"\r"))
            if not self._dropping:
                self._emit(piece)

    def _emit(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final=final)
        if not text:
            return
        combined = self._partial + text
        parts = combined.splitlines(keepends=True)
        self._partial = "" if combined.endswith(("\n", "\r")) else parts.pop()
        self._lines.extend(part.rstrip("\r\n") for part in parts)
        if self._echo is not None:
            try:
                self._echo.write(text)
                self._echo.flush()
            except (OSError, ValueError):
                self._echo = None  # the terminal went away (closed pipe); keep logging


def _closed(log: IO[bytes]) -> None:
    """Close a log whose disk is full; a close that fails to flush is no error here."""
    with contextlib.suppress(OSError):
        log.close()
