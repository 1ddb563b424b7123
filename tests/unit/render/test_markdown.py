from __future__ import annotations

import re

from perfdoctor.render.markdown import md_text, render_markdown

from .fixtures import HOSTILE, cpu_report, empty_series_report, hostile_report
from .golden_files import assert_matches_golden


def _table_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _cells(row: str) -> int:
    """Cell count of a GFM table row: pipes not escaped with a backslash split cells."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


def test_smoke_sections_and_figures():
    text = render_markdown(cpu_report())
    for heading in (
        "# perfdoctor report:",
        "## Diagnosis",
        "## Baseline step",
        "### Where a step goes",
        "## Findings",
        "## Recommendations",
        "## Variants",
        "## Skipped rules",
        "## Environment",
        "## Artifacts",
    ):
        assert heading in text
    assert "2.43x ± 0.06" in text
    assert "**accepted**" in text and "**rejected**" in text
    assert "image\\_cnn.py:48" in text
    assert "```python\ntorch.set_num_threads(2)\n```" in text
    assert "perfdoctor tensorboard perfdoctor-runs/20260101-120000-image\\_cnn" in text


def test_tables_are_rectangular():
    for report in (cpu_report(), hostile_report()):
        blocks = _table_blocks(render_markdown(report))
        assert blocks
        for block in blocks:
            widths = {_cells(row) for row in block}
            assert len(widths) == 1, block


def test_hostile_text_is_literal():
    text = render_markdown(hostile_report())
    # Outside code blocks no raw HTML tag, link or emphasis survives.
    outside_code = re.sub(r"(?ms)^(`{3,}).*?^\1\s*$", "", text)
    # A "<" not escaped by a backslash would open an HTML tag.
    assert not re.search(r"(?<!\\)<(script|img|/script)", outside_code)
    assert not re.search(r"(?<!\\)\]\(http", outside_code)  # no link
    assert not re.search(r"(?<!\\)\$a", outside_code)  # GitHub math stays off
    assert "\\<script\\>" in outside_code
    # The code change is kept verbatim, inside a fence longer than any backtick run in it.
    assert "````python\n" + HOSTILE in text


def test_md_text_escapes_block_starts():
    assert md_text("1. item") == "1\\. item"
    assert md_text("- item") == "\\- item"
    assert md_text("# title") == "\\# title"
    assert md_text("41.5 ms") == "41.5 ms"
    assert md_text("a\nb\tc") == "a b c"


def test_empty_run_says_what_was_not_measured():
    text = render_markdown(empty_series_report())
    assert "None measured" in text
    assert "partial" in text  # the crashed run is flagged in the diagnosis


def test_markdown_golden():
    assert_matches_golden("report.md", render_markdown(cpu_report()))
