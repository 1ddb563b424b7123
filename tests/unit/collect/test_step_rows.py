"""steps.jsonl's rows: times to 4 decimals without round() (the same figures, the same JSON),
and rows encoded without the schema's conversion (the same bytes as through it)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import msgspec

from perfdoctor import run_schema, rundir
from perfdoctor.collect.probes_steps import ClosedStep
from perfdoctor.collect.step_log import NO_ARM, StepLog, _row_of, _StepLine, four_decimals
from perfdoctor.model import StepRecord


def test_four_decimals_is_round_to_4_and_prints_at_most_4_decimals() -> None:
    rng = random.Random(0)
    values = [rng.uniform(0, 10) for _ in range(5000)] + [rng.uniform(0, 1e6) for _ in range(5000)]
    values += [0.0, 0.00005, 1.23455, 2.5e-5, 123456.78915]
    for value in values:
        got = four_decimals(value)
        assert abs(got - round(value, 4)) <= 1e-4 + 1e-9 * value, value
        decimals = json.dumps(got).split(".")[1] if "." in json.dumps(got) else ""
        assert len(decimals) <= 4 and "e" not in json.dumps(got), (value, got)


def test_a_rows_milliseconds_are_its_seconds_to_4_decimals() -> None:
    step = ClosedStep(index=3, start=10.0)
    step.end = 10.0123456789
    step.data_s, step.data_calls = 0.00123456, 1
    step.forward_s, step.forward_calls = 0.004, 1
    step.backward_s, step.micro_batches = 0.0061111111, 1
    step.optimizer_s = 0.00099999
    row = _row_of(
        (step, "timed", 1234, 0.01199996, None, True, None, None, NO_ARM), None, True, None
    )
    assert row.wall_ms == 12.3457
    assert row.data_wait_ms == 1.2346
    assert row.forward_ms == 4.0
    assert row.backward_ms == 6.1111
    assert row.optimizer_ms == 1.0
    assert row.cpu_ms == 12.0
    assert row.arm is msgspec.UNSET and row.rss_bytes == 1234


def _step(index: int, shape: int) -> ClosedStep:
    """A closed step whose optional parts are on or off by the bits of `shape`."""
    step = ClosedStep(index=index, start=1.0)
    step.end = 1.0 + 0.0031234567 * (index + 1)
    if shape & 1:
        step.data_s, step.data_calls = 0.0004444449, 1
    if shape & 2:
        step.forward_s, step.forward_calls = 0.00123456, 2
    if shape & 4:
        step.backward_s, step.micro_batches = 0.0022222, 1
        step.optimizer_s = 0.00055555
    if shape & 8:
        step.batch_size = 64
    if shape & 16:
        step.eval_forward_s, step.save_s = 0.0011, 0.00025
    if shape & 32:
        step.nograd_forward_s = 0.003
    step.losses = ()
    return step


def test_rows_encoded_as_built_are_the_lines_the_schema_would_write() -> None:
    """Every shape of row (optional phases, loop fields, CUDA memory, comm, an A/B arm, a
    loss finite or not, device time measured or not) gives the bytes of the checked path
    (msgspec's conversion into a StepRecord, then its encoding), and decodes as steps.jsonl
    is read."""
    index = 0
    for shape, arm, loss, device, cuda, comm, rss, cpu in itertools.product(
        range(64),
        (NO_ARM, None, "on"),
        (None, 0.25, math.nan),
        (None, "measured", "missing"),
        (None, 1024),
        (None, 1.5),
        (None, 4096),
        (None, 0.0021),
    ):
        if random.Random(index).random() > 0.08 and shape not in (0, 63):
            index += 1
            continue  # a sample of the product: every value of each axis is met
        step = _step(index, shape)
        raw = (step, "timed", rss, cpu, comm, bool(shape & 1), cuda, cuda, arm)
        finite = loss is None or math.isfinite(loss)
        kept = loss if finite else None
        device_ms = None if device is None else ({index: 7.5} if device == "measured" else {})
        built = _row_of(raw, kept, finite, device_ms)
        # The checked path, as the step log wrote every row before: a dict of the set fields.
        reference = {
            name: getattr(built, name)
            for name in built.__struct_fields__
            if getattr(built, name) is not msgspec.UNSET
        }
        checked = run_schema.encode_lines(run_schema.step_rows([reference]))
        assert run_schema.encode_lines([built]) == checked, built
        decoded = run_schema.decode_step_line(checked.rstrip(b"\n"))
        assert decoded.index == index and decoded.loss_finite is (None if finite else False)
        assert decoded.device_ms == (7.5 if device == "measured" else None)
        index += 1


def test_the_flush_writes_nonfinite_losses_and_device_times_as_before(tmp_path: Path) -> None:
    import torch

    log = StepLog(tmp_path, origin=0.0)
    losses = [torch.tensor(0.5), torch.tensor(float("inf")), None]
    for index, loss in enumerate(losses):
        step = _step(index, 7)
        step.losses = (loss,) if loss is not None else ()
        log.add_step((step, "timed", None, 0.001, None, True, None, None, NO_ARM))
    log.add({"index": 3, "phase": "timed", "wall_ms": 2.0, "micro_batches": 1}, ())
    log.close()
    steps = rundir.load_steps(tmp_path)
    assert [s.index for s in steps] == [0, 1, 2, 3]
    assert [s.loss for s in steps] == [0.5, None, None, None]
    assert [s.loss_finite for s in steps] == [None, False, None, None]
    assert log.nonfinite_losses == 1
    assert steps[0].forward_ms == 1.2346 and steps[0].cpu_ms == 1.0


def test_the_childs_line_has_every_step_record_field_in_its_order() -> None:
    """A field StepRecord gains must be written by the child too, where the reader expects
    it: the line's keys come from _StepLine's fields, in their order."""
    import dataclasses

    assert _StepLine.__struct_fields__ == tuple(f.name for f in dataclasses.fields(StepRecord))


def test_a_value_json_cannot_hold_costs_its_row_only(tmp_path: Path) -> None:
    """A batch size of a type msgspec cannot encode (a bug upstream): the row is written
    as a JSON object with the value as text, and the rows around it stay whole."""

    class Odd:
        def __str__(self) -> str:
            return "odd"

    log = StepLog(tmp_path, origin=0.0)
    for index in range(3):
        step = _step(index, 7)
        step.batch_size = Odd() if index == 1 else 8  # type: ignore[assignment]
        log.add_step((step, "timed", None, 0.001, None, True, None, None, NO_ARM))
    log.close()
    lines = (tmp_path / rundir.STEPS_FILE).read_bytes().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[1]["batch_size"] == "odd" and "arm" not in rows[1]
    # The rows around it decode as steps.jsonl is read; the odd one is refused there by
    # its field (rundir.load_steps: a row of the wrong type is a contract violation).
    assert [run_schema.decode_step_line(lines[i]).batch_size for i in (0, 2)] == [8, 8]
