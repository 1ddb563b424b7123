"""steps.jsonl's times to 4 decimals without round(): the same figures, the same JSON."""

from __future__ import annotations

import json
import random

from perfdoctor.collect.probes_steps import ClosedStep
from perfdoctor.collect.step_log import NO_ARM, _row_of, four_decimals


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
    row = _row_of((step, "timed", 1234, 0.01199996, None, True, None, None, NO_ARM))
    assert row["wall_ms"] == 12.3457
    assert row["data_wait_ms"] == 1.2346
    assert row["forward_ms"] == 4.0
    assert row["backward_ms"] == 6.1111
    assert row["optimizer_ms"] == 1.0
    assert row["cpu_ms"] == 12.0
    assert "arm" not in row and row["rss_bytes"] == 1234
