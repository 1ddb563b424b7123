"""The SQLite index: built from the session directories, damaged -> rebuilt (and said),
reconciled with the disk on every read, and two processes writing at once lose nothing."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfdoctor.history import INDEX_FILE, list_sessions, record_session
from perfdoctor.history.index import _open
from tests.unit.history.sessions import make_session

ROOT = Path(__file__).resolve().parents[3]


def _rows(out: Path) -> list[str]:
    with sqlite3.connect(out / INDEX_FILE) as db:
        return sorted(name for (name,) in db.execute("SELECT session FROM sessions"))


def test_the_first_record_builds_the_index_from_every_session(tmp_path: Path):
    out = tmp_path / "runs"
    make_session(out, "20261201-100000-train", created_at="2026-12-01T10:00:00+0000")
    second = make_session(out, "20261202-100000-train", created_at="2026-12-02T10:00:00+0000")
    assert not (out / INDEX_FILE).exists()
    record_session(out, second)
    assert _rows(out) == ["20261201-100000-train", "20261202-100000-train"]
    with sqlite3.connect(out / INDEX_FILE) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_sessions_oldest_first_and_by_script(tmp_path: Path):
    out, proj = tmp_path / "runs", tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("")
    make_session(out, "b", created_at="2026-12-02T10:00:00+0000", cwd=proj)
    make_session(out, "a", created_at="2026-12-01T10:00:00+0000", cwd=proj)
    make_session(out, "c", created_at="2026-12-03T10:00:00+0000", script="other.py", cwd=proj)
    make_session(out, "d", created_at="2026-12-04T10:00:00+0000", cwd=tmp_path / "elsewhere")
    assert [s.session for s in list_sessions(out)] == ["a", "b", "c", "d"]
    # A path names one script: the train.py of another directory is another script.
    assert [s.session for s in list_sessions(out, str(proj / "train.py"))] == ["a", "b"]
    # A name as profiled: every train.py.
    assert [s.session for s in list_sessions(out, "train.py")] == ["a", "b", "d"]
    assert [s.session for s in list_sessions(out, "other.py")] == ["c"]
    assert list_sessions(out, "nothing.py") == []


def test_a_damaged_index_is_rebuilt_and_the_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    out = tmp_path / "runs"
    make_session(out, "a")
    (out / INDEX_FILE).write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="perfdoctor.history.index"):
        rows = list_sessions(out)
    assert [s.session for s in rows] == ["a"]
    assert any("damaged" in r.message and "rebuilding" in r.message for r in caplog.records)
    assert _rows(out) == ["a"]


def test_a_foreign_database_by_that_name_is_replaced(tmp_path: Path):
    out = tmp_path / "runs"
    make_session(out, "a")
    with sqlite3.connect(out / INDEX_FILE) as db:
        db.execute("CREATE TABLE sessions (id INTEGER, user TEXT)")
    assert [s.session for s in list_sessions(out)] == ["a"]
    assert _rows(out) == ["a"]


def test_a_lost_index_is_rebuilt(tmp_path: Path):
    out = tmp_path / "runs"
    record_session(out, make_session(out, "a"))
    (out / INDEX_FILE).unlink()
    assert [s.session for s in list_sessions(out)] == ["a"]


def test_reads_follow_the_disk(tmp_path: Path):
    import shutil

    out = tmp_path / "runs"
    record_session(out, make_session(out, "a"))
    make_session(out, "b")  # profiled by a perfdoctor that wrote no index
    shutil.rmtree(out / "a")  # deleted by hand
    assert [s.session for s in list_sessions(out)] == ["b"]
    assert _rows(out) == ["b"]


def test_a_rewritten_report_replaces_its_row(tmp_path: Path):
    out = tmp_path / "runs"
    session = make_session(out, "a", step_ms=40.0)
    record_session(out, session)
    make_session(tmp_path / "again", "a", step_ms=30.0)
    (session / "report.json").write_bytes((tmp_path / "again" / "a" / "report.json").read_bytes())
    record_session(out, session)
    assert [s.step_ms_p50 for s in list_sessions(out)] == [30.0]
    assert _rows(out) == ["a"]


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from perfdoctor.history import record_session
    out, start = Path(sys.argv[1]), float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.001)
    for name in sys.argv[3:]:
        record_session(out, out / name)
    """
)


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path):
    import time

    out = tmp_path / "runs"
    out.mkdir()
    with _open(out):
        pass  # the index exists (empty) before the sessions: no rebuild can hide a lost row
    names = [f"s{i:02d}" for i in range(40)]
    for name in names:
        make_session(out, name)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    start = time.time() + 3  # both past their imports, then writing together
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(out), str(start), *part], env=env)
        for part in (names[0::2], names[1::2])
    ]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    assert _rows(out) == names
