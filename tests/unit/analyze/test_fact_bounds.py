"""No share above its whole reaches a rule or a report (analyze/fact_bounds.py, issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze import facts as facts_module
from perfdoctor.analyze.fact_bounds import UNBOUNDED_FRACS, share_facts, within_bounds
from perfdoctor.diagnose_traces import diagnose_traces

from .synthetic_trace import input_bound_trace, write_trace


def test_a_share_above_one_is_withheld_and_said() -> None:
    values, said = within_bounds(
        {"gpu_busy_frac": 1.31, "data_wait_frac": 0.2, "rank_step_ms_p50_spread_frac": 15.8}
    )
    assert values["gpu_busy_frac"] is None
    assert values["data_wait_frac"] == 0.2
    assert values["rank_step_ms_p50_spread_frac"] == 15.8  # a spread, not a share
    (line,) = said
    assert "gpu_busy_frac" in line and "131.0%" in line and "withheld" in line


def test_negative_shares_are_withheld_and_float_noise_is_not() -> None:
    values, said = within_bounds({"gpu_comm_exposed_frac": -0.2, "gpu_busy_frac": 1.0 + 1e-9})
    assert values["gpu_comm_exposed_frac"] is None and values["gpu_busy_frac"] == 1.0 + 1e-9
    assert len(said) == 1


def test_a_part_longer_than_its_step_is_withheld() -> None:
    values, said = within_bounds({"data_wait_ms_p50": 30.0, "step_ms_p50": 12.5})
    assert values["data_wait_ms_p50"] is None and values["step_ms_p50"] == 12.5
    assert "longer than the 12.5 ms step" in said[0]
    values, said = within_bounds({"data_wait_ms_p50": 1.16, "step_ms_p50": 12.5})
    assert values["data_wait_ms_p50"] == 1.16 and not said


def test_every_gpu_window_share_is_bounded() -> None:
    shares = share_facts()
    assert {"gpu_busy_frac", "gpu_idle_host_data_frac", "mfu_frac", "comm_kernel_frac"} <= shares
    assert not shares & UNBOUNDED_FRACS


def test_a_report_never_prints_a_share_over_its_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever an analysis upstream gets wrong, the trace report withholds the figure and
    says which one."""
    real = facts_module.fact_values

    def broken(record, samples=None):  # a bug upstream: busy 131%
        return {**real(record, samples), "gpu_busy_frac": 1.31}

    monkeypatch.setattr(facts_module, "fact_values", broken)
    path = write_trace(tmp_path / "t.json", input_bound_trace())
    (done,) = diagnose_traces([path], tmp_path / "out")
    report = done.report
    assert report.facts["gpu_busy_frac"] is None
    assert any("gpu_busy_frac came out at 131.0%" in w for w in report.warnings)


def test_a_saving_outside_the_step_is_not_promised() -> None:
    from perfdoctor.model import Finding, GainEstimate
    from perfdoctor.rules import evaluate
    from perfdoctor.rules.base import Rule
    from tests.unit.rules.factsets import make_facts

    def check(facts, t):  # a rule whose estimate went wrong
        return Finding(
            rule_id="test-overshoot", severity="warning", title="t", explanation="e",
            evidence=(), gain=GainEstimate(step_time_frac=1.7, method="share x 2"),
        )  # fmt: skip

    rule = Rule(
        id="test-overshoot", title="t", area="test", needs=(), check=check, description="d",
        source="s", thresholds={},
    )  # fmt: skip
    (finding,) = evaluate(make_facts("gpu"), rules=(rule,)).findings
    assert finding.gain.step_time_frac is None
    assert "170%" in finding.gain.method and "outside 0-100%" in finding.gain.method
