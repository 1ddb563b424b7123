"""`perfdoctor history`: the sessions as a rich table, or as JSON."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.history.summary import SessionSummary
from perfdoctor.render import format as fmt

HEADLINE_CHARS = 90
SCRIPT_CHARS = 28


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
    # Columns that would be empty for every session are left out: the table fits 100
    # columns with the headline readable.
    columns: list[tuple[str, dict[str, Any], Callable[[SessionSummary], str]]] = [
        ("date", {"no_wrap": True}, lambda s: s.created_at[:16].replace("T", " ")),
        ("script", {"overflow": "fold"}, lambda s: _script(s.script)),
    ]
    if any(s.argv for s in sessions):
        columns.append(("arguments", {"overflow": "fold", "max_width": 24}, _argv))
    if any(s.git_commit for s in sessions):
        columns.append(("commit", {"no_wrap": True}, _commit))
    columns.append(("step p50", {"justify": "right", "overflow": "fold"}, _step))
    columns.append(
        ("headline", {"ratio": 1, "min_width": 24}, lambda s: short_headline(s.headline))
    )
    if any(s.accepted_fixes for s in sessions):
        columns.append(("accepted fixes", {"overflow": "fold", "max_width": 24}, _fixes))
    table = Table(title=f"perfdoctor sessions in {out_dir}", title_justify="left")
    for name, options, _ in columns:
        table.add_column(name, **options)
    for s in sessions:
        # Text, not markup: a script name or argument in [brackets] is shown as it is.
        table.add_row(*(Text(fmt.one_line(str(cell(s)), HEADLINE_CHARS)) for _, _, cell in columns))
    console.print(table)


def _argv(s: SessionSummary) -> str:
    return shlex.join(s.argv)


def _fixes(s: SessionSummary) -> str:
    return ", ".join(s.accepted_fixes)


def _step(s: SessionSummary) -> str:
    """The baseline's median step, "-> " the one with the accepted fixes when measured."""
    text = fmt.ms(s.step_ms_p50)
    if s.fixed_step_ms_p50 is not None:
        text += f" -> {fmt.ms(s.fixed_step_ms_p50)}"
    if s.status != "completed":
        text += f" ({s.status})"
    return text


def _commit(s: SessionSummary) -> str:
    """The short hash, "+" when tracked files differed from it."""
    if not s.git_commit:
        return ""
    return s.git_commit[:8] + ("+" if s.git_dirty else "")


def _script(script: str) -> str:
    if len(script) <= SCRIPT_CHARS or "/" not in script:
        return script
    return ".../" + script.rsplit("/", 1)[1]


def short_headline(text: str) -> str:
    """The headline's sentence without its evidence: "Input-bound: 27% of each step waits
    for the DataLoader: data_wait_frac = 26.6% (> 5.0%)." -> up to the last ": "."""
    head, sep, tail = text.rpartition(": ")
    return head if sep and " = " in tail else text
