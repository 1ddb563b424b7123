"""Every format is found by its name in one table, and the session's files come from it."""

from __future__ import annotations

import pytest

from perfdoctor import rundir
from perfdoctor.errors import EXIT_USAGE, UsageError
from perfdoctor.render.registry import (
    COMPARISON_RENDERERS,
    REPORT_RENDERERS,
    file_renderers,
    find_renderer,
)

from .fixtures import cpu_report


def test_the_report_formats_and_their_files() -> None:
    assert list(REPORT_RENDERERS) == ["terminal", "md", "html", "json", "brief"]
    assert set(file_renderers(REPORT_RENDERERS)) == {
        rundir.REPORT_MD,
        rundir.REPORT_HTML,
        rundir.REPORT_JSON,
    }
    assert list(COMPARISON_RENDERERS) == ["terminal", "json"]


@pytest.mark.parametrize("renderers", [REPORT_RENDERERS, COMPARISON_RENDERERS])
def test_every_renderer_resolves_to_a_function(renderers) -> None:
    for renderer in renderers.values():
        assert callable(renderer.load()), renderer


def test_an_unknown_format_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as caught:
        find_renderer(REPORT_RENDERERS, "xml")
    assert caught.value.exit_code == EXIT_USAGE
    assert str(caught.value) == "--format must be one of terminal, md, html, json, brief"


def test_text_formats_return_text_and_the_terminal_needs_a_console() -> None:
    report = cpu_report()
    assert find_renderer(REPORT_RENDERERS, "md").render(report).startswith("# perfdoctor")
    with pytest.raises(ValueError):
        find_renderer(REPORT_RENDERERS, "terminal").render(report)
