"""batch_plan.py's pure helpers: time per sample for the A/B machinery, and the offer of
--plan-batch when a finding asks for a batch change."""

from __future__ import annotations

from types import SimpleNamespace

from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.batch_plan import offer, per_sample
from perfdoctor.model import Finding
from perfdoctor.optimize.estimate import estimate_speedup
from perfdoctor.optimize.verdicts import speed_verdict


def test_per_sample_turns_a_slower_step_into_a_faster_batch() -> None:
    # Batch 64 takes 1.5x the step of batch 32: per sample it is 1.33x faster.
    small = [RunSample("a", (30.0, 31.0, 29.0, 30.0), samples_per_step=32.0) for _ in range(2)]
    large = [RunSample("b", (45.0, 46.0, 44.0, 45.0), samples_per_step=64.0) for _ in range(2)]
    by_step = estimate_speedup(small, large)
    by_sample = estimate_speedup([per_sample(s) for s in small], [per_sample(s) for s in large])
    assert by_step is not None and by_step.speedup < 1
    assert by_sample is not None and abs(by_sample.speedup - 4 / 3) < 0.02
    assert speed_verdict(by_sample, "")[0] == "accepted"


class _Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        self.lines.append(message)


def _finding(rule_id: str, *fixes: str) -> Finding:
    return Finding(
        rule_id=rule_id,
        severity="warning",
        title="t",
        evidence=(),
        explanation="e",
        optimizations=fixes,
    )


def test_offer_only_for_findings_the_plan_addresses() -> None:
    sink = _Notes()
    offer(SimpleNamespace(findings=(_finding("input-bound", "dataloader-workers"),)), sink)  # type: ignore[arg-type]
    assert sink.lines == []
    offer(SimpleNamespace(findings=(_finding("gpu-underused", "larger-batch"),)), sink)  # type: ignore[arg-type]
    assert len(sink.lines) == 1 and "--plan-batch" in sink.lines[0]
    assert sink.lines[0].startswith("gpu-underused")
