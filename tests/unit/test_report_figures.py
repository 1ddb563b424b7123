"""Every figure of a session report comes from analyze/run_stats.py, and the baseline's and
each variant's by the same definitions (issue 15: one statistics module for run figures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.run_stats import breakdown_ms, pool_figures, timed_steps
from perfdoctor.diagnose import analyze_session, write_reports
from perfdoctor.model import StepPlan, Target
from perfdoctor.optimize.run_samples import load_run_samples
from perfdoctor.optimize.verdicts import compare_variant
from perfdoctor.render.json_report import report_from_dict
from perfdoctor.session import Session, VariantPlan, save_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
BASELINES = ("baseline", "baseline/repeat-2")
VARIANT = "cpu-threads"
VARIANTS = (VARIANT, f"{VARIANT}/repeat-2")


def _copy_run(fixture: Path, dest: Path, *, scale: float, label: str) -> None:
    """A copy of a recorded run with its step times scaled, as another run of it would be."""
    shutil.copytree(fixture, dest, ignore=shutil.ignore_patterns("repeat-*"))
    if dest.name.startswith("repeat-"):  # repeats are timing-only runs: no trace
        for trace in dest.glob("*.pt.trace.json*"):
            trace.unlink()
    rows = [json.loads(line) for line in (dest / "steps.jsonl").read_text().splitlines()]
    for row in rows:
        row["wall_ms"] *= scale
        row["batch_size"] = row.get("batch_size") or 16
    (dest / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["label"] = label
    (dest / "manifest.json").write_text(json.dumps(manifest))


def _session(tmp_path: Path, fixture: Path) -> Path:
    session = tmp_path / "session"
    scales = {"baseline": 1.0, "baseline/repeat-2": 1.1, VARIANT: 0.8, f"{VARIANT}/repeat-2": 0.85}
    for rel in ("baseline", VARIANT, "baseline/repeat-2", f"{VARIANT}/repeat-2"):
        _copy_run(fixture, session / rel, scale=scales[rel], label=rel.split("/")[0])
    save_session(
        session,
        Session(
            target=Target(kind="script", name="train.py", argv=()),
            cwd=str(tmp_path),
            plan=StepPlan(),
            seed=0,
            repeat=2,
            apply=True,
            created_at="2026-01-01T00:00:00+0000",
            baseline_runs=BASELINES,
            variants=(VariantPlan(VARIANT, (VARIANT,), runs=VARIANTS),),
            run_order=("baseline", VARIANT, "baseline/repeat-2", f"{VARIANT}/repeat-2"),
        ),
    )
    return session


@pytest.mark.parametrize("fixture", ["tuned_mlp_cpu", "cnn_slow_dataloader_cpu"])
def test_baseline_and_variant_figures_use_the_same_definitions(
    tmp_path: Path, fixture: str
) -> None:
    session = _session(tmp_path, FIXTURES / fixture)
    write_reports(session, analyze_session(session))
    report = report_from_dict(json.loads((session / "report.json").read_text()))
    base, (variant,) = report.baseline, report.variants

    baseline_runs = load_run_samples(session / rel for rel in BASELINES)
    variant_runs = load_run_samples(session / rel for rel in VARIANTS)
    profiled = pool_figures(baseline_runs[:1])
    pooled_base, pooled_variant = pool_figures(baseline_runs), pool_figures(variant_runs)

    # The baseline: the profiled run's figures, and the pool over both of its runs.
    assert base.step_ms_p50 == profiled.step_ms_p50 is not None
    assert base.step_ms_p90 == profiled.step_ms_p90
    assert base.throughput_samples_s == profiled.throughput_samples_s is not None
    assert base.peak_memory_bytes == profiled.peak_memory_bytes is not None
    assert base.pooled_step_ms_p50 == pooled_base.step_ms_p50
    assert base.pooled_step_ms_p90 == pooled_base.step_ms_p90
    assert base.pooled == pooled_base.pooled

    # The variant: the same definitions over its own runs.
    assert variant.step_ms_p50 == pooled_variant.step_ms_p50 is not None
    assert variant.step_ms_p90 == pooled_variant.step_ms_p90
    assert variant.throughput_samples_s == pooled_variant.throughput_samples_s is not None
    assert variant.peak_memory_bytes == pooled_variant.peak_memory_bytes is not None
    assert variant.energy_j_per_step == pooled_variant.energy_j_per_step
    assert variant.baseline_step_ms_p50 == pooled_base.step_ms_p50

    # The phase breakdown of each, and the facts the rules read, by the same medians.
    for label, rel in (("baseline", "baseline"), (VARIANT, VARIANT)):
        expected = breakdown_ms(timed_steps(load_run(session / rel).steps))
        assert report.series["breakdown_ms"][label] == expected
    assert dict(base.breakdown_ms) == report.series["breakdown_ms"]["baseline"]
    assert report.facts["step_ms_p50"] == base.step_ms_p50
    assert report.facts["throughput_samples_s"] == base.throughput_samples_s

    # Judging the baseline's profiled run as if it were a variant reproduces its figures.
    as_variant = compare_variant(baseline_runs, baseline_runs[:1], ())
    assert (as_variant.step_ms_p50, as_variant.step_ms_p90) == (base.step_ms_p50, base.step_ms_p90)
    assert as_variant.throughput_samples_s == base.throughput_samples_s
    assert as_variant.peak_memory_bytes == base.peak_memory_bytes
