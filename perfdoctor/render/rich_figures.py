"""The two-column "measure: value" grid the terminal's sections open with (memory, compute,
compile): one definition, so the sections line up the same way."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text


def figures_grid(figures: Iterable[tuple[str, str]]) -> Table:
    """A borderless grid: the measure in bold, its value wrapping in the rest of the width."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1)
    for measure, value in figures:
        grid.add_row(measure, Text(value))
    return grid
