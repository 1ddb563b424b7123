"""Small session directories for the history tests: session.json as the pipeline writes it,
report.json from the renderers' fixture report, and (optionally) the recorded CPU run as
baseline/ so that `compare` has steps to judge. No child run."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from perfdoctor.model import StepPlan, Target
from perfdoctor.render.json_report import render_json
from perfdoctor.rundir import REPORT_JSON, update_latest_link
from perfdoctor.session import Session, save_session
from tests.unit.render.fixtures import cpu_report

FIXTURE_RUN = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "cnn_slow_dataloader_cpu"


def make_session(
    out: Path,
    name: str,
    *,
    script: str = "train.py",
    cwd: Path | None = None,
    created_at: str = "2026-12-01T10:00:00+0000",
    step_ms: float = 40.0,
    argv: tuple[str, ...] = ("--epochs", "2"),
    kind: str = "script",
    git: dict | None = None,
    with_run: bool = False,
    accepted: bool = True,
) -> Path:
    session_dir = out / name
    session_dir.mkdir(parents=True)
    session = Session(
        target=Target(kind=kind, name=script, argv=argv),  # type: ignore[arg-type]
        cwd=str(cwd or out.parent),
        plan=StepPlan(),
        seed=0,
        repeat=2,
        apply=True,
        created_at=created_at,
        git=git,
    )
    save_session(session_dir, session)
    base = cpu_report()
    variants = base.variants if accepted else ()
    report = replace(
        base,
        script=script,
        created_at=created_at,
        baseline=replace(base.baseline, step_ms_p50=step_ms),
        variants=variants,
        run_dir=str(session_dir),
    )
    (session_dir / REPORT_JSON).write_text(render_json(report))
    if with_run:
        shutil.copytree(FIXTURE_RUN, session_dir / "baseline")
    update_latest_link(out, session_dir)
    return session_dir
