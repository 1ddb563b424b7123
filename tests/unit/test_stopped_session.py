"""A session that did not end normally never reads as completed when it is re-rendered."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfdoctor.diagnose import analyze_session
from perfdoctor.model import StepPlan, Target
from perfdoctor.render.markdown import render_markdown
from perfdoctor.session import Session, load_session, save_session

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "tuned_mlp_cpu"


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    session = tmp_path / "20260101-000000-tuned_mlp"
    shutil.copytree(FIXTURE, session / "baseline")
    return session


def _save(session_dir: Path, **changes) -> None:
    session = Session(
        target=Target(kind="script", name="tuned_mlp.py", argv=()),
        cwd=str(session_dir.parent),
        plan=StepPlan(),
        seed=0,
        repeat=2,
        apply=True,
        created_at="2026-01-01T00:00:00+0000",
        baseline_runs=("baseline",),
        run_order=("baseline",),
        **changes,
    )
    save_session(session_dir, session)


def test_the_fixture_itself_reads_completed(session_dir: Path) -> None:
    _save(session_dir)
    report = analyze_session(session_dir)
    assert (report.status, report.exit_code) == ("completed", 0)
    assert "No bottleneck rule fired on this run." in render_markdown(report)


def test_a_session_stopped_during_a_variant_reads_interrupted(session_dir: Path) -> None:
    stop = {"by": "SIGTERM", "exit_code": 143, "during": "cpu-threads"}
    _save(session_dir, interrupted=stop)
    assert load_session(session_dir).interrupted == stop
    report = analyze_session(session_dir)
    assert (report.status, report.exit_code) == ("interrupted", 143)
    assert report.warnings[0] == (
        "perfdoctor was stopped by SIGTERM during cpu-threads: the baseline's diagnosis is "
        "complete; the variants' results are partial"
    )
    markdown = render_markdown(report)
    assert "**Status:** interrupted (exit code 143)" in markdown
    assert "No bottleneck rule fired on this run." not in markdown
    assert "measured before the run stopped" in markdown


def test_a_baseline_without_a_manifest_reads_interrupted(session_dir: Path) -> None:
    # perfdoctor killed outright (SIGKILL): the launcher never wrote the manifest.
    _save(session_dir)
    (session_dir / "baseline" / "manifest.json").unlink()
    report = analyze_session(session_dir)
    assert report.status == "interrupted"
    assert report.exit_code != 0
    assert any("no manifest.json" in w for w in report.warnings)


def test_a_crashed_scripts_error_line_is_in_the_report(session_dir: Path) -> None:
    _save(session_dir)
    path = session_dir / "baseline" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(status="script_crashed", exit_code=1, error="RuntimeError: boom at step 12")
    path.write_text(json.dumps(manifest))
    report = analyze_session(session_dir)
    assert "the script's error: RuntimeError: boom at step 12" in report.warnings
    assert "RuntimeError: boom at step 12" in render_markdown(report)


def test_a_crashed_scripts_timed_steps_still_give_its_step_figures(session_dir: Path) -> None:
    """A script that raised after 6 timed steps: the report showed "steps timed 6" beside a
    step time, throughput and peak memory of "—"."""
    _save(session_dir)
    path = session_dir / "baseline" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(status="script_crashed", exit_code=1, error="RuntimeError: boom")
    path.write_text(json.dumps(manifest))
    report = analyze_session(session_dir)
    assert report.baseline.steps_timed > 0
    assert report.baseline.step_ms_p50 is not None
    assert report.baseline.peak_memory_bytes is not None
