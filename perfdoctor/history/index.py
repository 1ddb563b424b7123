"""The history index: `history.sqlite` in the --out directory, one row per session.

The only module that touches SQLite. The index is a cache of the session directories: a
missing one is built from them, a damaged one (not a database, a failed integrity check) is
removed and rebuilt, with a warning in the log, and every read reconciles it with what is on
disk (sessions added by an older perfdoctor or another machine, sessions deleted by hand).

Two perfdoctor processes may end their sessions at once: WAL journaling (readers never
block the writer), a busy timeout (a writer waits for the other instead of failing), and one
short transaction per row (BEGIN IMMEDIATE takes the write lock up front, so two writers
never deadlock upgrading a read lock). A row is keyed by the session directory's name, so
writing one twice (a report re-rendered) replaces it.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from perfdoctor.history.summary import (
    SessionSummary,
    load_summary,
    summary_from_json,
    summary_to_json,
)
from perfdoctor.rundir import REPORT_JSON, SESSION_FILE

log = logging.getLogger(__name__)

INDEX_FILE = "history.sqlite"
BUSY_TIMEOUT_MS = 30_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    script TEXT NOT NULL,
    script_path TEXT,
    summary TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_script ON sessions (script_path, script, created_at);
"""
_COLUMNS = {"session", "created_at", "script", "script_path", "summary"}
_UPSERT = (
    "INSERT OR REPLACE INTO sessions (session, created_at, script, script_path, summary) "
    "VALUES (?, ?, ?, ?, ?)"
)


class IndexDamaged(Exception):
    pass


def record_session(out_dir: Path, session_dir: Path) -> SessionSummary | None:
    """Add (or replace) the row of `session_dir`, which has its report written. A missing
    index is first built from every session directory; a damaged one is rebuilt."""
    summary = load_summary(session_dir)
    if summary is None:
        return None
    with _open(out_dir) as db:
        _write(db, summary)
    return summary


def list_sessions(out_dir: Path, script: str | None = None) -> list[SessionSummary]:
    """Every session in `out_dir` with a report, oldest first; with `script`, only that
    script's (history.script_matches). An index that cannot be written (a read-only copy)
    is skipped: the sessions are then read from their directories directly."""
    if not out_dir.is_dir():
        return []
    try:
        with _open(out_dir) as db:
            _reconcile(db, out_dir)
            rows = [
                s
                for s in (summary_from_json(text) for (text,) in db.execute(_SELECT_ALL))
                if s is not None
            ]
    except (sqlite3.Error, OSError) as err:
        log.warning(
            "history index in %s not usable (%s): reading the sessions directly", out_dir, err
        )
        rows = [s for s in map(load_summary, session_dirs(out_dir)) if s is not None]
    rows.sort(key=lambda s: (s.created_at, s.session))
    return filter_script(rows, script) if script is not None else rows


_SELECT_ALL = "SELECT summary FROM sessions"


def session_dirs(out_dir: Path) -> list[Path]:
    """The session directories of `out_dir` that hold a report (not the `latest` link)."""
    found = []
    for path in sorted(out_dir.iterdir()):
        if path.is_symlink() or not path.is_dir():
            continue
        if (path / REPORT_JSON).is_file() and (path / SESSION_FILE).is_file():
            found.append(path)
    return found


def filter_script(rows: list[SessionSummary], script: str) -> list[SessionSummary]:
    """The sessions of `script`: by its absolute path when it names an existing file (two
    train.py in two directories are two scripts), else as given, else by file name."""
    given = Path(script)
    if given.is_file():
        resolved = str(given.resolve())
        by_path = [
            r for r in rows if r.script_path and Path(r.script_path).resolve() == Path(resolved)
        ]
        if by_path:
            return by_path
    exact = [r for r in rows if r.script == script or r.script == f"-m {script}"]
    if exact:
        return exact
    return [r for r in rows if Path(r.script).name == given.name]


# --------------------------------------------------------------------------- SQLite


@contextlib.contextmanager
def _open(out_dir: Path) -> Iterator[sqlite3.Connection]:
    path = out_dir / INDEX_FILE
    fresh = not path.exists()
    try:
        db = _connect(path)
    except IndexDamaged as err:
        log.warning(
            "history index %s is damaged (%s): rebuilding it from the session directories",
            path,
            err,
        )
        _remove(path)
        db = _connect(path)
        fresh = True
    try:
        if fresh:
            count = _rebuild(db, out_dir)
            log.info("history index %s built from %d session directories", path, count)
        yield db
    finally:
        db.close()


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are ours (BEGIN IMMEDIATE ... COMMIT), not implicit.
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(_SCHEMA)
        check = db.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise IndexDamaged(f"integrity check: {check[0] if check else 'no answer'}")
        columns = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
        if columns != _COLUMNS:  # a `sessions` table of something else's
            raise IndexDamaged(f"a sessions table with columns {sorted(columns)}")
    except sqlite3.DatabaseError as err:
        db.close()
        if isinstance(err, sqlite3.OperationalError) and "locked" in str(err):
            raise  # busy past the timeout: not damage
        raise IndexDamaged(str(err)) from None
    except IndexDamaged:
        db.close()
        raise
    return db


def _remove(path: Path) -> None:
    for name in (path.name, path.name + "-wal", path.name + "-shm", path.name + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            (path.parent / name).unlink()


def _write(db: sqlite3.Connection, summary: SessionSummary) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            _UPSERT,
            (
                summary.session,
                summary.created_at,
                summary.script,
                summary.script_path,
                summary_to_json(summary),
            ),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _rebuild(db: sqlite3.Connection, out_dir: Path) -> int:
    count = 0
    for session_dir in session_dirs(out_dir):
        summary = load_summary(session_dir)
        if summary is not None:
            _write(db, summary)
            count += 1
    return count


def _reconcile(db: sqlite3.Connection, out_dir: Path) -> None:
    """Rows for the sessions on disk the index lacks (or holds in an older form), none for
    sessions that are gone."""
    on_disk = {p.name: p for p in session_dirs(out_dir)}
    indexed = {
        name: summary_from_json(text)
        for name, text in db.execute("SELECT session, summary FROM sessions")
    }
    for name, session_dir in on_disk.items():
        if indexed.get(name) is None:
            summary = load_summary(session_dir)
            if summary is not None:
                _write(db, summary)
    gone = [name for name in indexed if name not in on_disk]
    if gone:
        db.execute("BEGIN IMMEDIATE")
        db.executemany("DELETE FROM sessions WHERE session = ?", [(n,) for n in gone])
        db.execute("COMMIT")
