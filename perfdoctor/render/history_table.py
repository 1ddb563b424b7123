"""`perfdoctor history`: the sessions as a rich table, or as JSON."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.history.summary import SessionSummary
from perfdoctor.render import format as fmt

HEADLINE_CHARS = 90


def history_json(sessions: Sequence[SessionSummary], out_dir: str, script: str | None) -> str:
    data = {
        "out_dir": out_dir,
        "script": script,
        "sessions": [s.to_dict() for s in sessions],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def render_history(
    sessions: Sequence[SessionSummary], console: Console, *, out_dir: str, script: str | None
) -> None:
    if not sessions:
        what = f" of {script}" if script else ""
        console.print(
            f"no session{what} in {out_dir} (perfdoctor profile writes them there)", markup=False
        )
        return
    table = Table(title=f"perfdoctor sessions in {out_dir}", title_justify="left")
    table.add_column("date", no_wrap=True)
    table.add_column("script")
    table.add_column("arguments", overflow="fold")
    table.add_column("commit", no_wrap=True)
    table.add_column("step p50", justify="right", no_wrap=True)
    table.add_column("with fixes", justify="right")
    table.add_column("headline", overflow="fold")
    table.add_column("accepted fixes", overflow="fold")
    for s in sessions:
        cells = (
            s.created_at[:19].replace("T", " "),
            s.script,
            shlex.join(s.argv) if s.argv else "",
            _commit(s),
            fmt.ms(s.step_ms_p50) + ("" if s.status == "completed" else f" ({s.status})"),
            fmt.ms(s.fixed_step_ms_p50) if s.fixed_step_ms_p50 is not None else "",
            fmt.one_line(s.headline, HEADLINE_CHARS),
            ", ".join(s.accepted_fixes),
        )
        # Text, not markup: a script name or argument in [brackets] is shown as it is.
        table.add_row(*(Text(fmt.printable(c)) for c in cells))
    console.print(table)


def _commit(s: SessionSummary) -> str:
    if not s.git_commit:
        return ""
    return s.git_commit[:10] + ("+" if s.git_dirty else "")
