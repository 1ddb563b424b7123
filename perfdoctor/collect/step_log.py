"""steps.jsonl and progress.jsonl: what each step measured, written as the run goes.

Step rows are buffered and appended at phase ends, every `FLUSH_EVERY` steps and at exit;
losses stay detached tensors until then, so capturing them never adds a host sync per step.
progress.jsonl gets one tiny line per step for the parent's live display.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from pathlib import Path
from typing import IO, Any

from perfdoctor import rundir
from perfdoctor.collect.device_clock import DeviceStepClock
from perfdoctor.run_schema import ProgressRow, SchemaMismatch, encode_line, step_row

log = logging.getLogger(__name__)

FLUSH_EVERY = 50
# progress.jsonl is flushed at most this often: a write syscall per step costs ~10 us, and
# the parent's live display polls a few times a second anyway.
PROGRESS_FLUSH_S = 0.25


class ArtifactUnwritable(BaseException):
    """The run's artifacts cannot be written (no space left, a read-only file system).

    A BaseException, as PlanComplete is, so that the script's `except Exception` does not
    swallow it: the bootstrap ends the run with one line and perfdoctor's exit code 73, and no
    traceback that would read as the script's."""


class StepLog:
    def __init__(self, run_dir: Path, origin: float) -> None:
        """`origin`: the perf_counter value of t=0 on the parent's clock (progress `t`)."""
        # Set once the script uses CUDA: fills each row's `device_ms` at flush.
        self.device_clock: DeviceStepClock | None = None
        self._steps_path = run_dir / rundir.STEPS_FILE
        self._progress_path = run_dir / rundir.PROGRESS_FILE
        self._origin = origin
        self._progress_flushed = 0.0
        self._pending: list[tuple[dict[str, Any], tuple[Any, ...]]] = []
        self._progress: IO[str] | None = None
        self.rows_written = 0
        self.rows_added = 0  # every step with a row: what observations call steps_seen
        self.nonfinite_losses = 0

    def add(self, row: dict[str, Any], losses: tuple[Any, ...]) -> None:
        self._pending.append((row, losses))
        self.rows_added += 1

    def progress(
        self, index: int, phase: str, wall_ms: float, now: float, note: str | None = None
    ) -> None:
        """One line per step; `now` is the perf_counter time the step ended."""
        try:
            if self._progress is None:
                self._progress = self._progress_path.open("a")
            row = ProgressRow(
                step=index,
                phase=phase,
                t=round(now - self._origin, 4),
                wall_ms=round(wall_ms, 4),
                note=note,
            )
            self._progress.write(encode_line(row).decode())
            if now - self._progress_flushed >= PROGRESS_FLUSH_S:
                self._progress.flush()
                self._progress_flushed = now
        except OSError:
            log.debug("progress line not written", exc_info=True)

    def flush(self) -> None:
        if not self._pending:
            return
        # The rows leave the buffer only once they are on disk: a SIGTERM (SystemExit) raised
        # in the middle of a flush leaves them for close() to write, instead of losing them.
        pending = list(self._pending)
        values = _loss_values([losses for _, losses in pending])
        lines = []
        for (row, _), loss in zip(pending, values, strict=True):
            if loss is not None and not math.isfinite(loss):
                # JSON has no NaN: keep the fact that the loss was not finite.
                row["loss"] = None
                row["loss_finite"] = False
                self.nonfinite_losses += 1
            else:
                row["loss"] = loss
        if self.device_clock is not None:
            device_ms = self.device_clock.durations([row["index"] for row, _ in pending])
            for row, _ in pending:
                row["device_ms"] = device_ms.get(row["index"])
        for row, _ in pending:
            lines.append(_step_line(row))
        try:
            with self._steps_path.open("a") as fh:
                fh.write("\n".join(lines) + "\n")
        except OSError as err:
            why = err.strerror or str(err)
            raise ArtifactUnwritable(f"cannot write {self._steps_path}: {why}") from err
        del self._pending[: len(pending)]
        self.rows_written += len(lines)
        if self._progress is not None:
            try:
                self._progress.flush()
            except OSError:
                log.debug("progress not flushed", exc_info=True)

    def close(self) -> None:
        try:
            self.flush()
        except ArtifactUnwritable:
            log.debug("last steps not written", exc_info=True)
        if self._progress is not None:
            with contextlib.suppress(OSError):
                self._progress.close()
            self._progress = None


def _step_line(row: dict[str, Any]) -> str:
    """One steps.jsonl line, through the schema the analysis decodes it with."""
    try:
        return encode_line(step_row(row)).decode().rstrip("\n")
    except SchemaMismatch:
        # A bug in the row's making; the row itself is still worth keeping as it is.
        log.warning("step row does not match the schema: %r", row, exc_info=True)
        return json.dumps(row)


def _loss_values(per_step: list[tuple[Any, ...]]) -> list[float | None]:
    """Sum of each step's captured losses, with one device->host copy per device."""
    flat: list[Any] = [t for losses in per_step for t in losses]
    scalars = _to_floats(flat)
    out: list[float | None] = []
    pos = 0
    for losses in per_step:
        if not losses:
            out.append(None)
            continue
        chunk = scalars[pos : pos + len(losses)]
        pos += len(losses)
        out.append(None if any(v is None for v in chunk) else float(sum(chunk)))  # type: ignore[arg-type]
    return out


def _to_floats(tensors: list[Any]) -> list[float | None]:
    if not tensors:
        return []
    try:
        import torch

        by_device: dict[Any, list[int]] = {}
        for i, t in enumerate(tensors):
            by_device.setdefault(t.device, []).append(i)
        result: list[float | None] = [None] * len(tensors)
        for indices in by_device.values():
            stacked = torch.stack([tensors[i].reshape(()).double() for i in indices])
            for i, value in zip(indices, stacked.cpu().tolist(), strict=True):
                result[i] = float(value)
        return result
    except Exception:
        log.debug("batched loss conversion failed; converting one by one", exc_info=True)
        values: list[float | None] = []
        for t in tensors:
            try:
                values.append(float(t))
            except Exception:
                values.append(None)
        return values
