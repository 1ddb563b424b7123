"""`perfdoctor rules` and `perfdoctor optimizations`: the catalogs as terminal tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _cell(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _table(title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Table:
    table = Table(title=title, show_lines=True, expand=False)
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    return table


def render_rules(console: Console) -> None:
    from perfdoctor.rules import describe_rules

    rows = describe_rules()
    columns = ("id", "area", "title", "needs", "thresholds", "source")
    # One table per module, titled with its file: where to read or change a rule, without a
    # column that a 100-character terminal would fold.
    by_module: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_module.setdefault(str(row["module"]), []).append(row)
    console.print(f"{len(rows)} diagnosis rules in {len(by_module)} modules", markup=False)
    for module, module_rows in by_module.items():
        path = module.replace(".", "/") + ".py"
        console.print(_table(f"{path}: {len(module_rows)} rules", module_rows, columns))


def render_optimizations(console: Console) -> None:
    from perfdoctor.optimize.catalog import describe_optimizations

    rows = describe_optimizations()
    columns = ("id", "kind", "title", "risk", "applies_when", "verify")
    console.print(_table(f"{len(rows)} optimizations", rows, columns))
