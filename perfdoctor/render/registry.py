"""Every output format, found by its name: `report -f`, `diagnose -f`, `compare --json` and
the session's report files (diagnose.write_reports) all look their renderer up here.

A renderer is named by "module:function" and imported on first use: `--help` loads no
renderer, and matplotlib is loaded only when the HTML report draws a chart that needs it (a
diagnosed trace's report draws none: its charts are written as SVG directly).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rich.console import Console

from perfdoctor.errors import UsageError
from perfdoctor.rundir import REPORT_HTML, REPORT_JSON, REPORT_MD


@dataclass(frozen=True)
class Renderer:
    """One format. A text renderer returns its text; the terminal renderer draws on a rich
    Console instead (and returns None)."""

    name: str  # the value of --format
    function: str  # "module:function"
    file_name: str | None = None  # the session's report file in this format (None: none)
    draws_on_console: bool = False

    def load(self) -> Callable[..., Any]:
        module, _, attr = self.function.partition(":")
        return getattr(importlib.import_module(module), attr)

    def render(self, subject: Any, console: Console | None = None) -> str | None:
        if self.draws_on_console:
            if console is None:
                raise ValueError(f"the {self.name} renderer draws on a console: give one")
            self.load()(subject, console)
            return None
        return self.load()(subject)


def _by_name(*renderers: Renderer) -> Mapping[str, Renderer]:
    return MappingProxyType({r.name: r for r in renderers})


# A perfdoctor.model.Report: `report`, `diagnose` and the files of every session.
REPORT_RENDERERS = _by_name(
    Renderer("terminal", "perfdoctor.render.terminal:render_terminal", draws_on_console=True),
    Renderer("md", "perfdoctor.render.markdown:render_markdown", REPORT_MD),
    Renderer("html", "perfdoctor.render.html:render_html", REPORT_HTML),
    Renderer("json", "perfdoctor.render.json_report:render_json", REPORT_JSON),
    # For agents and CI logs: printed only, never a session file (report.json holds it all).
    Renderer("brief", "perfdoctor.render.brief:render_brief"),
)

# A render.comparison_output.Compared: `compare` (terminal) and `compare --json`.
COMPARISON_RENDERERS = _by_name(
    Renderer(
        "terminal",
        "perfdoctor.render.comparison_output:render_compared",
        draws_on_console=True,
    ),
    Renderer("json", "perfdoctor.render.comparison_output:render_compared_json"),
)


def find_renderer(renderers: Mapping[str, Renderer], name: str) -> Renderer:
    """The renderer of format `name`; an unknown one is a usage error naming the known."""
    found = renderers.get(name)
    if found is None:
        raise UsageError(f"--format must be one of {', '.join(renderers)}")
    return found


def file_renderers(renderers: Mapping[str, Renderer]) -> dict[str, Renderer]:
    """The formats written to files, by file name, in the order of the table."""
    return {r.file_name: r for r in renderers.values() if r.file_name is not None}
