"""analyze_session over a recorded run laid out as a session: what the report must say."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from perfdoctor.diagnose import analyze_session, write_reports
from perfdoctor.render import format as fmt

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "tuned_mlp_cpu"


def _session(tmp_path: Path, history: dict | None = None) -> Path:
    session = tmp_path / "session"
    shutil.copytree(FIXTURE, session / "baseline")
    if history is not None:
        obs_path = session / "baseline" / "observations.json"
        obs = json.loads(obs_path.read_text())
        obs["memory_history"] = history
        obs_path.write_text(json.dumps(obs))
    return session


def test_truncated_memory_history_is_said_in_words(tmp_path: Path) -> None:
    report = analyze_session(_session(tmp_path, {"truncated": True}))
    assert report.facts["memory_history_truncated"] is True
    assert any("memory history was truncated" in w for w in report.warnings)


def test_complete_history_raises_no_warning_and_size_is_reported(tmp_path: Path) -> None:
    report = analyze_session(_session(tmp_path))
    assert not any("truncated" in w for w in report.warnings)
    assert report.run_dir_bytes and report.run_dir_bytes > 10_000


def _bytes_on_disk(session: Path) -> int:
    return sum(p.stat().st_size for p in session.rglob("*") if p.is_file() and not p.is_symlink())


def test_reported_size_counts_the_reports_and_scalars_written_with_it(tmp_path: Path) -> None:
    session = _session(tmp_path)
    written = write_reports(session, analyze_session(session))
    on_disk = _bytes_on_disk(session)
    assert json.loads((session / "report.json").read_text())["run_dir_bytes"] == on_disk
    assert written.report.run_dir_bytes == on_disk  # what the terminal summary shows
    assert fmt.nbytes(on_disk) in (session / "report.md").read_text()
    # Re-rendering (`perfdoctor report`) replaces the reports rather than adding to the figure.
    again = write_reports(session, analyze_session(session))
    assert again.report.run_dir_bytes == _bytes_on_disk(session) == on_disk
