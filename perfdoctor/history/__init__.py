"""A history of `perfdoctor profile` sessions: an SQLite index in the --out directory.

summary.py (pure) builds one SessionSummary per session from its saved artifacts;
index.py is the only code that touches SQLite; git_info.py records the script's commit at
profile time. The index is a cache: it is rebuilt from the session directories whenever it
is missing or damaged, and reconciled with them whenever it is read.

For other commands (`perfdoctor history`, `compare latest`, the MCP server's `history`
tool): `list_sessions(out_dir, script=None)`.
"""

from __future__ import annotations

from perfdoctor.history.index import INDEX_FILE, list_sessions, record_session
from perfdoctor.history.summary import SessionSummary

__all__ = ["INDEX_FILE", "SessionSummary", "list_sessions", "record_session"]
