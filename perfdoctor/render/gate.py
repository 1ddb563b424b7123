"""The regression gate of `perfdoctor compare --fail-if-slower` in the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from perfdoctor.optimize.regression_gate import METRIC_NAMES, SINGLE_RUN_SPREAD_LOG
from perfdoctor.render import format as fmt

if TYPE_CHECKING:
    from perfdoctor.optimize.regression_gate import GateCheck, GateResult

_OUTCOME_STYLE = {
    "pass": "green",
    "regression": "bold red",
    "cannot_tell": "yellow",
    "unmeasured": "red",
}


def _check_line(check: GateCheck) -> Text:
    text = Text(f"  {METRIC_NAMES[check.metric]:<13}", style="bold")
    text.append(f"{check.outcome.replace('_', ' '):<12}", style=_OUTCOME_STYLE[check.outcome])
    text.append(fmt.one_line(check.reason))
    runs = f"{check.runs_a} vs {check.runs_b} runs"
    if check.noise_assumed:
        runs += "; one run's launch-to-launch noise assumed"
    text.append(f"\n  {'':<25}{runs}", style="dim")
    return text


def render_gate(result: GateResult, console: Console) -> None:
    console.print(Text("Regression gate" + (" (--strict)" if result.strict else ""), style="bold"))
    for check in result.checks:
        console.print(_check_line(check))
    style = {"passed": "bold green", "undecided": "bold yellow"}.get(result.outcome, "bold red")
    console.print(Text("  gate " + result.summary, style=style))
    if any(c.noise_assumed and c.metric == "step_time" for c in result.checks):
        console.print(
            Text(
                "  note: one run shows only step-to-step noise: the gate assumes "
                f"±{SINGLE_RUN_SPREAD_LOG:.0%} launch-to-launch noise for a one-run side "
                "(the verdict above does not)",
                style="dim",
            )
        )
    if result.hint:
        console.print(Text("  hint: " + result.hint, style="dim"))
