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
from perfdoctor.optimize.estimate import paired_medians
from perfdoctor.optimize.run_samples import load_run_samples
from perfdoctor.optimize.verdicts import compare_variant
from perfdoctor.render.json_report import report_from_dict
from perfdoctor.session import Session, VariantPlan, save_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
BASELINES = ("baseline", "baseline/repeat-2")
VARIANT = "cpu-threads"
VARIANTS = (VARIANT, f"{VARIANT}/repeat-2")


def _copy_run(fixture: Path, dest: Path, *, scale: float, label: str, batch: int | None) -> None:
    """A copy of a recorded run with its step times scaled, as another run of it would be,
    and each step's batch size set to `batch` (None: the steps do not say)."""
    shutil.copytree(fixture, dest, ignore=shutil.ignore_patterns("repeat-*"))
    if dest.name.startswith("repeat-"):  # repeats are timing-only runs: no trace
        for trace in dest.glob("*.pt.trace.json*"):
            trace.unlink()
    rows = [json.loads(line) for line in (dest / "steps.jsonl").read_text().splitlines()]
    for row in rows:
        row["wall_ms"] *= scale
        row["batch_size"] = batch
    (dest / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["label"] = label
    (dest / "manifest.json").write_text(json.dumps(manifest))


def _session(tmp_path: Path, fixture: Path, batch: int | None) -> Path:
    session = tmp_path / "session"
    scales = {"baseline": 1.0, "baseline/repeat-2": 1.1, VARIANT: 0.8, f"{VARIANT}/repeat-2": 0.85}
    for rel in ("baseline", VARIANT, "baseline/repeat-2", f"{VARIANT}/repeat-2"):
        _copy_run(fixture, session / rel, scale=scales[rel], label=rel.split("/")[0], batch=batch)
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


# tuned_mlp has no DataLoader: its steps carry the batch size. cnn_slow_dataloader's steps
# do not, so every side falls back to its DataLoader's batch size (64) alike.
@pytest.mark.parametrize(
    ("fixture", "batch"), [("tuned_mlp_cpu", 16), ("cnn_slow_dataloader_cpu", None)]
)
def test_baseline_and_variant_figures_use_the_same_definitions(
    tmp_path: Path, fixture: str, batch: int | None
) -> None:
    session = _session(tmp_path, FIXTURES / fixture, batch)
    write_reports(session, analyze_session(session))
    report = report_from_dict(json.loads((session / "report.json").read_text()))
    base, (variant,) = report.baseline, report.variants

    baseline_runs = load_run_samples(session / rel for rel in BASELINES)
    variant_runs = load_run_samples(session / rel for rel in VARIANTS)
    profiled = pool_figures(baseline_runs[:1])
    pooled_base, pooled_variant = pool_figures(baseline_runs), pool_figures(variant_runs)

    def figures(x: object) -> tuple[object, ...]:
        names = ("step_ms_p50", "step_ms_p90", "throughput_samples_s", "peak_memory_bytes")
        return tuple(getattr(x, name) for name in names)

    assert None not in figures(profiled) and None not in figures(pooled_variant)
    # The baseline: the profiled run's figures, and the pool over both of its runs.
    assert figures(base) == figures(profiled)
    assert (base.pooled_step_ms_p50, base.pooled_step_ms_p90, base.pooled) == (
        pooled_base.step_ms_p50,
        pooled_base.step_ms_p90,
        pooled_base.pooled,
    )
    # The variant: the same definitions over its own runs (its pooled, descriptive figures)
    # and, for the speedup, the paired medians of both sides, whose ratio it is.
    pooled_names = ("pooled_step_ms_p50", "step_ms_p90", "throughput_samples_s")
    assert tuple(getattr(variant, n) for n in pooled_names) == figures(pooled_variant)[:3]
    assert variant.peak_memory_bytes == pooled_variant.peak_memory_bytes
    assert variant.energy_j_per_step == pooled_variant.energy_j_per_step
    base_ms, variant_ms = paired_medians(list(zip(baseline_runs, variant_runs, strict=True)))
    assert (variant.baseline_step_ms_p50, variant.step_ms_p50) == (base_ms, variant_ms)
    assert variant.speedup == pytest.approx(base_ms / variant_ms, rel=1e-12)

    # The phase breakdown of each, and the facts the rules read, by the same medians.
    for label, rel in (("baseline", "baseline"), (VARIANT, VARIANT)):
        expected = breakdown_ms(timed_steps(load_run(session / rel).steps))
        assert report.series["breakdown_ms"][label] == expected
    assert dict(base.breakdown_ms) == report.series["breakdown_ms"]["baseline"]
    assert report.facts["step_ms_p50"] == base.step_ms_p50
    assert report.facts["throughput_samples_s"] == base.throughput_samples_s

    # Judging the baseline's profiled run as if it were a variant reproduces its figures.
    itself = compare_variant(baseline_runs, baseline_runs[:1], ())
    assert itself.step_ms_p50 == pytest.approx(base.step_ms_p50, rel=1e-12)
    assert figures(itself)[1:] == figures(base)[1:]
