"""What `perfdoctor compare` prints: the comparison of A and B, and the regression gate's
checks when a --fail-if limit was given, in the terminal or as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console

from perfdoctor.rundir import to_jsonable

if TYPE_CHECKING:
    from perfdoctor.optimize.compare_runs import RunComparison
    from perfdoctor.optimize.regression_gate import GateResult


@dataclass(frozen=True)
class Compared:
    result: RunComparison
    gate: GateResult | None = None  # None: no --fail-if limit, no gate


def render_compared(compared: Compared, console: Console) -> None:
    from perfdoctor.render.compare import render_comparison

    render_comparison(compared.result, console)
    if compared.gate is not None:
        from perfdoctor.render.gate import render_gate

        render_gate(compared.gate, console)


def render_compared_json(compared: Compared) -> str:
    payload = to_jsonable(compared.result)
    if compared.gate is not None:
        payload["gate"] = to_jsonable(compared.gate)
    return json.dumps(payload, indent=2) + "\n"
