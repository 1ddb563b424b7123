"""Step facts a user reads side by side come from one statistic: the median step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from perfdoctor.analyze.facts import _step_facts
from perfdoctor.analyze.run_stats import breakdown_ms, samples_per_step, throughput_samples_s
from perfdoctor.model import StepRecord
from perfdoctor.rules import evaluate
from perfdoctor.rules.input_pipeline import INPUT_BOUND

from .factsets import make_facts


@dataclass
class Record:
    steps: tuple[StepRecord, ...]
    observations: dict[str, Any] = field(default_factory=dict)
    ranks: tuple[Any, ...] = ()

    @property
    def timed_steps(self) -> tuple[StepRecord, ...]:
        return tuple(s for s in self.steps if s.phase == "timed")


def _steps(walls: list[float], waits: list[float], batch: int | None = 20) -> Record:
    return Record(
        tuple(
            StepRecord(
                index=i,
                phase="timed",
                wall_ms=wall,
                data_wait_ms=wait,
                forward_ms=5.0,
                backward_ms=8.0,
                optimizer_ms=2.0,
                batch_size=batch,
            )
            for i, (wall, wait) in enumerate(zip(walls, waits, strict=True))
        )
    )


def test_one_epoch_boundary_step_does_not_make_a_run_input_bound() -> None:
    # Measured shape: 95 of 116 ms waiting in the step that started the next epoch, about
    # 1 ms in the others; the summed share was 10% and input-bound fired.
    record = _steps([116.0] + [20.0] * 9, [95.0] + [1.0] * 9)
    facts = _step_facts(record)  # type: ignore[arg-type]
    assert facts["data_wait_frac"] == pytest.approx(1.0 / 20.0)
    fired = {f.rule_id for f in evaluate(make_facts(**facts)).findings}
    assert INPUT_BOUND not in fired


def test_waiting_in_most_steps_is_input_bound() -> None:
    record = _steps([60.0] * 10, [40.0] * 7 + [1.0] * 3)
    facts = _step_facts(record)  # type: ignore[arg-type]
    assert facts["data_wait_frac"] == pytest.approx(40.0 / 60.0)
    fired = {f.rule_id for f in evaluate(make_facts(**facts)).findings}
    assert INPUT_BOUND in fired


def test_breakdown_and_shares_come_from_the_same_medians() -> None:
    record = _steps([116.0] + [20.0] * 9, [95.0] + [1.0] * 9)
    parts = breakdown_ms(record.timed_steps)
    assert parts == {"data": 1.0, "forward": 5.0, "backward": 8.0, "optimizer": 2.0, "other": 4.0}
    facts = _step_facts(record)  # type: ignore[arg-type]
    for name, fact in (("data", "data_wait_frac"), ("forward", "forward_frac")):
        assert facts[fact] == pytest.approx(parts[name] / facts["step_ms_p50"])


def test_throughput_is_the_median_step_s() -> None:
    record = _steps([116.0] + [20.0] * 9, [1.0] * 10)
    facts = _step_facts(record)  # type: ignore[arg-type]
    assert facts["throughput_samples_s"] == pytest.approx(20 * 1000.0 / 20.0)
    walls = [s.step_ms for s in record.timed_steps]
    per_step = samples_per_step(record.timed_steps)
    assert throughput_samples_s(walls, per_step) == facts["throughput_samples_s"]
