"""steps.jsonl and progress.jsonl: what each step measured, written as the run goes.

Step rows are buffered and appended at phase ends, every `FLUSH_EVERY` steps and at exit;
losses stay detached tensors until then, so capturing them never adds a host sync per step.
progress.jsonl gets one tiny line per step for the parent's live display.

Per step the child only keeps a tuple of raw values (`add_step`, `progress`): the rows'
dicts and their JSON are made for a batch at a time when they are written, in one encoding
call (issue 30: the per-step cost of a small model's step is what perfdoctor adds to it).
The rows this module builds have their fields' types by construction and are encoded as
they are; rows given to `add` go through the schema first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from pathlib import Path
from typing import IO, Any

import msgspec

from perfdoctor import rundir
from perfdoctor.collect.device_clock import DeviceStepClock
from perfdoctor.collect.loop_probes import loop_fields
from perfdoctor.run_schema import (
    ProgressRow,
    SchemaMismatch,
    encode_line,
    encode_lines,
    step_row,
)

log = logging.getLogger(__name__)

FLUSH_EVERY = 50
# progress.jsonl is flushed at most this often: a write syscall per step costs ~10 us, and
# the parent's live display polls a few times a second anyway.
PROGRESS_FLUSH_S = 0.25
# A step without an in-process A/B arm (the row then has no `arm` key).
NO_ARM = object()


def four_decimals(value: float) -> float:
    """`value` (>= 0) to 4 decimals, as round(value, 4) but by integer arithmetic: round()
    formats and parses the number (dtoa, ~2,500 instructions a call; eight a step were 13% of
    a null step's added instructions, benchmarks/step_instructions.py). n / 10_000 for an
    integer n is the double nearest that decimal, so the JSON still reads x.xxxx. Halves
    round up, where round() rounds them to even."""
    return int(value * 10_000.0 + 0.5) / 10_000.0


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
        # (row dict, losses) from add(), or (raw tuple, losses) from add_step()
        self._pending: list[tuple[Any, tuple[Any, ...]]] = []
        self._progress_rows: list[tuple[int, str, float, float, str | None]] = []
        self._progress: IO[bytes] | None = None
        self.rows_written = 0
        self.rows_added = 0  # every step with a row: what observations call steps_seen
        self.nonfinite_losses = 0

    def add(self, row: dict[str, Any], losses: tuple[Any, ...]) -> None:
        self._pending.append((row, losses))
        self.rows_added += 1

    def add_step(self, raw: tuple[Any, ...], note: str | None = None) -> None:
        """A closed step's raw values, as Probes.step_closed takes them: (ClosedStep, phase,
        rss bytes, CPU seconds, comm ms, any DataLoader seen, CUDA allocated, CUDA max
        allocated, A/B arm or NO_ARM). The row is built when it is written (`_row_of`);
        the step's progress line (as `progress`) comes from the same values."""
        step = raw[0]
        self._pending.append((raw, step.losses))
        self.rows_added += 1
        end = step.end
        self._progress_rows.append((step.index, raw[1], end, (end - step.start) * 1000.0, note))
        if end - self._progress_flushed >= PROGRESS_FLUSH_S:
            self._progress_flushed = end
            self._write_progress()

    def progress(
        self, index: int, phase: str, wall_ms: float, now: float, note: str | None = None
    ) -> None:
        """One line per step; `now` is the perf_counter time the step ended. Kept as values
        and written (encoded in one call) at most every PROGRESS_FLUSH_S and at each flush."""
        self._progress_rows.append((index, phase, now, wall_ms, note))
        if now - self._progress_flushed >= PROGRESS_FLUSH_S:
            self._progress_flushed = now
            self._write_progress()

    def _write_progress(self) -> None:
        rows, self._progress_rows = self._progress_rows, []
        if not rows:
            return
        origin = self._origin
        try:
            if self._progress is None:
                self._progress = self._progress_path.open("ab")
            self._progress.write(
                encode_lines(
                    [
                        # four_decimals, inline (a call per value is what it saves)
                        ProgressRow(
                            step=index,
                            phase=phase,
                            t=int(max(now - origin, 0.0) * 10_000.0 + 0.5) / 10_000.0,
                            wall_ms=int(wall_ms * 10_000.0 + 0.5) / 10_000.0,
                            note=note,
                        )
                        for index, phase, now, wall_ms, note in rows
                    ]
                )
            )
            self._progress.flush()
        except OSError:
            log.debug("progress lines not written", exc_info=True)

    def flush(self) -> None:
        if not self._pending:
            return
        # The rows leave the buffer only once they are on disk: a SIGTERM (SystemExit) raised
        # in the middle of a flush leaves them for close() to write, instead of losing them.
        pending = list(self._pending)
        values = _loss_values([losses for _, losses in pending])
        device_ms: dict[int, float] | None = None
        if self.device_clock is not None:
            device_ms = self.device_clock.durations(
                [raw[0].index if type(raw) is tuple else raw["index"] for raw, _ in pending]
            )
        rows: list[Any] = []
        for (raw, _), loss in zip(pending, values, strict=True):
            finite = loss is None or math.isfinite(loss)
            if not finite:
                self.nonfinite_losses += 1
            if type(raw) is tuple:
                rows.append(_row_of(raw, loss if finite else None, finite, device_ms))
            else:
                rows.append(_checked_row(raw, loss if finite else None, finite, device_ms))
        text = _step_lines(rows)
        try:
            with self._steps_path.open("ab") as fh:
                fh.write(text)
        except OSError as err:
            why = err.strerror or str(err)
            raise ArtifactUnwritable(f"cannot write {self._steps_path}: {why}") from err
        del self._pending[: len(pending)]
        self.rows_written += len(pending)
        self._write_progress()

    def close(self) -> None:
        try:
            self.flush()
        except ArtifactUnwritable:
            log.debug("last steps not written", exc_info=True)
        self._write_progress()
        if self._progress is not None:
            with contextlib.suppress(OSError):
                self._progress.close()
            self._progress = None


class _StepLine(msgspec.Struct, kw_only=True):
    """A steps.jsonl line as the child writes its rows: StepRecord's fields in its order
    (tests/unit/collect/test_step_rows.py keeps them so). Fields left UNSET are left out of
    the line, as a StepRecord converted from a row dict without them leaves them out. A
    struct, not a dict: built in one C call, its keys encoded once for all rows."""

    index: int
    phase: str
    wall_ms: float
    data_wait_ms: float | None
    forward_ms: float | None
    backward_ms: float | None
    optimizer_ms: float | None
    micro_batches: int
    loss: float | None
    batch_size: int | None
    rss_bytes: int | None
    cuda_allocated_bytes: int | None
    cuda_max_allocated_bytes: int | None
    loss_finite: bool | msgspec.UnsetType = msgspec.UNSET
    device_ms: float | msgspec.UnsetType | None = msgspec.UNSET
    comm_ms: float | None
    arm: str | msgspec.UnsetType | None = msgspec.UNSET
    eval_forward_ms: float | msgspec.UnsetType = msgspec.UNSET
    nograd_forward_ms: float | msgspec.UnsetType = msgspec.UNSET
    save_ms: float | msgspec.UnsetType = msgspec.UNSET
    cpu_ms: float | None


def _row_of(
    raw: tuple[Any, ...], loss: float | None, finite: bool, device_ms: dict[int, float] | None
) -> _StepLine:
    """A step's line from add_step's raw tuple, its loss and its device time. It is encoded
    as it is, without msgspec's conversion into a StepRecord (2 us a row): every value here
    is made by this code with its field's type (int(), the integer arithmetic of
    four_decimals, the tracker's int(batch)), so the line is the one the conversion would
    encode (tests/unit/collect/test_step_rows.py checks both on rows of every shape)."""
    step, phase, rss, cpu_s, comm_ms, any_data, cuda_allocated, cuda_max, arm = raw
    # four_decimals(x * 1000.0), inline: this runs for every step.
    line = _StepLine(
        index=step.index,
        phase=phase,
        wall_ms=int((step.end - step.start) * 1e7 + 0.5) / 1e4,
        data_wait_ms=int(step.data_s * 1e7 + 0.5) / 1e4 if (step.data_calls or any_data) else None,
        forward_ms=int(step.forward_s * 1e7 + 0.5) / 1e4 if step.forward_calls else None,
        backward_ms=int(step.backward_s * 1e7 + 0.5) / 1e4 if step.micro_batches else None,
        optimizer_ms=int(step.optimizer_s * 1e7 + 0.5) / 1e4 if step.optimizer_s > 0 else None,
        micro_batches=step.micro_batches,
        loss=loss,
        batch_size=step.batch_size,
        rss_bytes=rss,
        cuda_allocated_bytes=cuda_allocated,
        cuda_max_allocated_bytes=cuda_max,
        comm_ms=comm_ms,
        cpu_ms=int(max(cpu_s, 0.0) * 1e7 + 0.5) / 1e4 if cpu_s is not None else None,
    )
    if not finite:
        line.loss_finite = False  # JSON has no NaN: keep the fact that the loss was not
    if device_ms is not None:
        line.device_ms = device_ms.get(step.index)
    if arm is not NO_ARM:
        line.arm = arm
    if step.eval_forward_s or step.nograd_forward_s or step.save_s:  # (a training step: no)
        for key, value in loop_fields(step).items():
            setattr(line, key, value)
    return line


def _checked_row(
    row: dict[str, Any], loss: float | None, finite: bool, device_ms: dict[int, float] | None
) -> Any:
    """A row dict given to add(), with its loss and device time, converted through the
    schema (a StepRecord), or the dict as it is when it does not match."""
    row["loss"] = loss
    if not finite:
        row["loss_finite"] = False
    if device_ms is not None:
        row["device_ms"] = device_ms.get(row["index"])
    try:
        return step_row(row)
    except SchemaMismatch:
        # A bug in the row's making; the row itself is still worth keeping as it is.
        log.warning("step row does not match the schema: %r", row, exc_info=True)
        return row


def _step_lines(rows: list[Any]) -> bytes:
    """steps.jsonl lines of the batch in one encoding call; line by line only when a value
    cannot be encoded (then as json.dumps writes it, with anything else as its str)."""
    try:
        return encode_lines(rows)
    except (TypeError, msgspec.EncodeError):
        log.warning("step rows with a value JSON cannot hold", exc_info=True)
    lines = []
    for row in rows:
        try:
            lines.append(encode_line(row))
        except (TypeError, msgspec.EncodeError):
            lines.append(json.dumps(_fields_of(row), default=str).encode() + b"\n")
    return b"".join(lines)


def _fields_of(row: Any) -> dict[str, Any]:
    """A row's set fields as a dict (a _StepLine's UNSET ones left out; a dict as it is)."""
    if isinstance(row, msgspec.Struct):
        values = ((name, getattr(row, name)) for name in row.__struct_fields__)
        return {name: value for name, value in values if value is not msgspec.UNSET}
    return row  # type: ignore[no-any-return]


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
        out.append(None if None in chunk else float(sum(chunk)))  # type: ignore[arg-type]
    return out


def _to_floats(tensors: list[Any]) -> list[float | None]:
    """Each loss as a float: a CPU loss arrives read already (probes_hooks), a device
    loss as a tensor, copied back with the others of its device."""
    if not tensors:
        return []
    try:
        import torch

        result: list[float | None] = [None] * len(tensors)
        by_device: dict[Any, list[int]] = {}
        for i, t in enumerate(tensors):
            if type(t) is float:
                result[i] = t
            else:
                by_device.setdefault(t.device, []).append(i)
        for device, indices in by_device.items():
            group = [tensors[i] for i in indices]
            if getattr(device, "type", None) == "cpu":
                # No copy to wait for: item() per loss is half the time of stacking them
                # (12 against 25 us for 50 losses, timeit).
                for i, t in zip(indices, group, strict=True):
                    result[i] = float(t.item())  # (one element: run() keeps no other)
                continue
            try:
                # Losses of one shape (the usual case): three ops for the whole batch of
                # rows, not two per loss (each a dispatch of ~2-5 us on a small step).
                stacked = torch.stack(group).reshape(len(group)).double()
            except RuntimeError:  # shapes () and (1,) mixed, or dtypes stack refuses
                stacked = torch.stack([t.reshape(()).double() for t in group])
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
