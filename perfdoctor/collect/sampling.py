"""Run device samplers in a daemon thread of the PARENT and append their rows to samples.jsonl.

Sampling lives in the parent (mechanics §5): the child's timing is not perturbed by NVML
ioctls or /proc reads, and the samples survive a child that crashes or is killed. Every row
gets `t`, seconds since the child was spawned, so rows line up with the child's own clock
(the child receives the same origin in PERFDOCTOR_T0_UNIX). The file format is in
docs/run-directory.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from perfdoctor.run_schema import SchemaMismatch, encode_line, sample_row
from perfdoctor.rundir import to_jsonable

logger = logging.getLogger(__name__)

Row = dict[str, Any]

DEFAULT_PERIOD_S = 0.1
# A sampler that keeps failing in ways it did not handle itself is dropped, not retried forever.
_MAX_UNEXPECTED_FAILURES = 3


class Sampler(Protocol):
    """One source of samples. All three methods are called from the sampling thread only."""

    name: str

    def start(self) -> list[Row]:
        """Set up (may be slow: NVML init); return rows to write once (notes, device info)."""
        ...

    def sample(self) -> list[Row]:
        """Read once; return zero or more rows (without `t`)."""
        ...

    def stop(self) -> None:
        """Release what start() acquired; must not raise."""
        ...


def note(message: str) -> Row:
    return {"kind": "note", "message": message}


class SamplingThread:
    """Calls every sampler once per period until stop(); writes rows as they come.

    The file is flushed after every tick, so a killed parent leaves at most one torn line
    (which perfdoctor.rundir.read_jsonl skips).
    """

    def __init__(
        self,
        samplers: Sequence[Sampler],
        out_path: Path,
        *,
        origin: float,
        origin_unix: float | None = None,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._samplers = list(samplers)
        self._out_path = out_path
        self._origin = origin
        self._origin_unix = origin_unix
        self._period_s = period_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.rows_written = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="perfdoctor-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning("sampler thread did not stop within %.1f s", timeout_s)

    def _now(self) -> float:
        return round(self._clock() - self._origin, 4)

    def _run(self) -> None:
        try:
            with self._out_path.open("a") as out:
                self._loop(out)
        except OSError as err:
            # The run directory vanished or the disk is full: sampling is best effort.
            logger.warning("device sampling stopped: %s", err)

    def _loop(self, out: IO[str]) -> None:
        if self._origin_unix is not None:
            self._write(out, [{"kind": "clock", "unix_s": self._origin_unix}], t=0.0)
        active: list[Sampler] = []
        for sampler in self._samplers:
            rows = self._call(sampler, sampler.start, "start")
            if rows is None:
                self._write(out, [note(f"{sampler.name} sampler could not start")])
                continue
            active.append(sampler)
            self._write(out, rows)
        failures = dict.fromkeys((s.name for s in active), 0)
        next_tick = self._clock()
        try:
            while not self._stop.is_set():
                for sampler in list(active):
                    rows = self._call(sampler, sampler.sample, "sample")
                    if rows is None:
                        failures[sampler.name] += 1
                        if failures[sampler.name] >= _MAX_UNEXPECTED_FAILURES:
                            active.remove(sampler)
                            self._write(out, [note(f"{sampler.name} sampler stopped")])
                        continue
                    failures[sampler.name] = 0
                    self._write(out, rows)
                self.ticks += 1
                # Fixed-rate ticks that skip ahead when a tick overran (e.g. a slow NVML call),
                # rather than drifting or bursting to catch up.
                next_tick += self._period_s
                now = self._clock()
                if next_tick < now:
                    next_tick = now + self._period_s
                self._stop.wait(next_tick - now)
        finally:
            for sampler in active:
                self._call(sampler, sampler.stop, "stop")

    def _call(self, sampler: Sampler, method: Callable[[], Any], what: str) -> Any:
        try:
            result = method()
        except Exception:
            logger.debug("%s sampler failed in %s", sampler.name, what, exc_info=True)
            return None
        return [] if result is None else result

    def _write(self, out: IO[str], rows: list[Row], t: float | None = None) -> None:
        if not rows:
            return
        stamp = self._now() if t is None else t
        for row in rows:
            # `kind` then `t` first, so the file reads well with head/grep.
            ordered = {"kind": row.get("kind"), "t": stamp, **row}
            out.write(_sample_line(ordered))
        out.flush()
        self.rows_written += len(rows)


def _sample_line(row: Row) -> str:
    """One samples.jsonl line, through the schema the analysis checks it with."""
    try:
        return encode_line(sample_row(row)).decode()
    except SchemaMismatch:
        # A sampler that grew a field the schema lacks: keep the row whole, and say so.
        logger.warning("sample row does not match the schema: %r", row, exc_info=True)
        return json.dumps(to_jsonable(row)) + "\n"
