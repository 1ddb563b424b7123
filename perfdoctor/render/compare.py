"""`perfdoctor compare` in the terminal: the verdict, A and B side by side, what differs.

Fits 100 columns (the Console from render.terminal.make_console is capped there). Every
string that comes from a run (paths, script arguments, fact values, finding titles) is a
`rich.text.Text`, so rich never reads it as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from perfdoctor.model import Finding, Scalar
from perfdoctor.optimize.verdicts import WITHIN_NOISE, undecided
from perfdoctor.render import format as fmt
from perfdoctor.render.summary import paired_step_text

if TYPE_CHECKING:
    from perfdoctor.optimize.compare_runs import FactChange, RunComparison, RunSide
    from perfdoctor.optimize.verdicts import VariantResult

_VERDICT_STYLE = {
    "accepted": "bold green",
    "rejected": "yellow",
    "undecided": "cyan",
    "failed": "red",
}
# The speed statistic the Verdict (and the gate) report, named where it is printed. The
# table's step time row shows the two step times it is the ratio of; the pooled p90 is a
# descriptive figure of another pool, and says so.
PAIRED_STATISTIC = "geometric mean of the paired run ratios A/B (above 1x: B is faster)"
POOLED_NOTE = (
    "step time, paired medians: for each side the geometric mean of the median steps of the "
    "runs paired in repeat order (A's run k with B's run k); A over B is the Verdict's "
    "speedup. p90, pooled: over all steps of all of a side's runs"
)
_MAX_NAMES = 8  # facts measured on one side only, listed by name before "and N more"


def render_comparison(result: RunComparison, console: Console) -> None:
    result = fmt.printable_all(result)  # names from artifacts: no raw control characters
    console.print(_header(result))
    console.print(_verdict_panel(result))
    console.print(_measures_table(result))
    console.print(Text(POOLED_NOTE, style="dim"))
    console.print(_differences(result))
    console.print(_facts_table(result))
    for line in _one_sided_facts(result):
        console.print(line)
    console.print(_findings(result))
    for note in result.notes:
        console.print(Text("note: " + fmt.one_line(note), style="dim"))


def _side_line(name: str, side: RunSide) -> Text:
    text = Text(f"{name}  ", style="bold")
    text.append(side.path)
    details = [side.script + (" " + " ".join(side.argv) if side.argv else "")]
    details.append(f"{side.runs} run" + ("" if side.runs == 1 else "s"))
    if side.device is not None:
        details.append(f"{side.device.kind}: {side.device.name}")
    if side.versions.get("torch"):
        details.append(f"torch {side.versions['torch']}")
    text.append("\n   " + fmt.one_line(" · ".join(details)), style="dim")
    return text


def _header(result: RunComparison) -> Group:
    return Group(
        Text("perfdoctor compare", style="bold"),
        _side_line("A", result.a),
        _side_line("B", result.b),
    )


def _verdict_panel(result: RunComparison) -> Panel:
    verdict = result.verdict
    line = Text("B against A: ")
    line.append(verdict_word(verdict), style=_VERDICT_STYLE.get(verdict.verdict, ""))
    line.append("  " + fmt.one_line(verdict.reason))
    parts: list[Text] = []
    unrelated = getattr(result, "unrelated", None)
    if unrelated:
        parts.append(Text("WARNING: " + fmt.one_line(unrelated), style="bold yellow"))
    parts.append(line)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row("Speedup", Text(speedup_text(verdict)))
    loss = Text(f"{fmt.signed_percent(result.loss_delta, 2)} vs A")
    # The reason already carries the note when the loss was no input to the verdict.
    if result.numerics_note and result.numerics_note not in verdict.reason:
        loss.append(" — " + fmt.one_line(result.numerics_note))
    grid.add_row("Loss", loss)
    return Panel(Group(*parts, grid), title="Verdict", title_align="left", box=box.ROUNDED)


def verdict_word(verdict: VariantResult) -> str:
    """The verdict as the reader takes it. B judged "within noise" of A is kept "rejected" in
    the JSON (it is no gain), but between two runs it says nothing about which is faster:
    with a wide band it is "cannot tell", with a narrow one "no difference"."""
    if verdict.verdict in ("rejected", "undecided") and verdict.reason.startswith(WITHIN_NOISE):
        return "CANNOT TELL" if undecided(verdict) else "NO DIFFERENCE"
    # "?": measured while other processes kept the machine busy (the reason says how much).
    return verdict.verdict.upper() + ("?" if verdict.low_confidence else "")


def speedup_text(verdict: VariantResult) -> str:
    """The paired speedup, the two step times it is the ratio of, the same figure as B's step
    time change (the gate's), and which statistic it is."""
    text = fmt.speedup(verdict.speedup, verdict.speedup_noise)
    if verdict.speedup is None or not verdict.speedup > 0:
        return text
    step_change = fmt.signed_percent(1.0 / verdict.speedup - 1.0, 1)
    if verdict.baseline_step_ms_p50 is not None and verdict.step_ms_p50 is not None:
        text += f": {paired_step_text(verdict)} (paired medians)"
    return f"{text} = {step_change} step time · {PAIRED_STATISTIC}"


def _relative(a: float | int | None, b: float | int | None) -> str:
    if a is None or b is None or a == 0:
        return fmt.MISSING
    return fmt.signed_percent((b - a) / abs(a), 1)


def _points(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return fmt.MISSING
    return f"{(b - a) * 100:+.1f} pts"


def _measures_table(result: RunComparison) -> Table:
    a, b = result.a, result.b
    table = Table(title="A and B", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("measure", no_wrap=True)
    table.add_column("A", justify="right", overflow="fold")
    table.add_column("B", justify="right", overflow="fold")
    table.add_column("change", justify="right", no_wrap=True)
    paired_a, paired_b = result.verdict.baseline_step_ms_p50, result.verdict.step_ms_p50
    rows: list[tuple[str, str, str, str]] = [
        (
            # The Verdict's speedup is exactly A / B of this row.
            "step time, paired medians",
            fmt.ms(paired_a),
            fmt.ms(paired_b),
            _relative(paired_a, paired_b),
        ),
        (
            "step time p90, pooled",
            fmt.ms(a.step_ms_p90),
            fmt.ms(b.step_ms_p90),
            _relative(a.step_ms_p90, b.step_ms_p90),
        ),
        (
            "throughput, pooled",
            fmt.throughput(a.throughput_samples_s),
            fmt.throughput(b.throughput_samples_s),
            _relative(a.throughput_samples_s, b.throughput_samples_s),
        ),
        (
            "data wait",
            fmt.percent(a.data_wait_frac),
            fmt.percent(b.data_wait_frac),
            _points(a.data_wait_frac, b.data_wait_frac),
        ),
        (
            "peak memory",
            fmt.nbytes(a.peak_memory_bytes),
            fmt.nbytes(b.peak_memory_bytes),
            _relative(a.peak_memory_bytes, b.peak_memory_bytes),
        ),
        (
            "energy per step",
            _joules(a.energy_j_per_step),
            _joules(b.energy_j_per_step),
            _relative(a.energy_j_per_step, b.energy_j_per_step),
        ),
        ("findings", str(len(a.findings)), str(len(b.findings)), ""),
        ("usable runs", str(a.runs), str(b.runs), ""),
        ("status", str(a.status), str(b.status), ""),
    ]
    for name, x, y, change in rows:
        table.add_row(name, Text(x), Text(y), Text(change))
    return table


def _joules(value: float | None) -> str:
    return fmt.MISSING if value is None else f"{fmt.number(value)} J"


def _differences(result: RunComparison) -> Table | Text:
    if not result.differences:
        return Text("Same script, arguments, seed, device, versions and step plan.", style="dim")
    table = Table(title="What differs", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("A", overflow="fold", ratio=1)
    table.add_column("B", overflow="fold", ratio=1)
    for diff in result.differences:
        table.add_row(diff.name, Text(fmt.one_line(diff.a)), Text(fmt.one_line(diff.b)))
    return table


# Units worth printing next to a fact's value; "count", "bool" or "name" would only clutter.
_SHOWN_UNITS = ("frac", "bytes", "ms", "samples/s")


def _fact_value(change: FactChange, value: Scalar) -> str:
    unit = change.unit if change.unit in _SHOWN_UNITS else fmt.unit_for(change.name)
    return fmt.scalar(value, unit)


def _fact_delta(change: FactChange) -> str:
    if change.absolute_change is None:
        return "changed"
    if change.unit == "frac" or fmt.unit_for(change.name) == "frac":
        return f"{change.absolute_change * 100:+.1f} pts"
    if change.relative_change is None:
        return f"{fmt.number(change.absolute_change)}"
    return fmt.signed_percent(change.relative_change, 1)


def _facts_table(result: RunComparison) -> Table | Text:
    if not result.fact_changes:
        return Text("No other fact changed by 10% or more.", style="dim")
    table = Table(
        title="Facts that changed most", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False
    )
    table.add_column("fact", overflow="fold", ratio=1)
    table.add_column("A", justify="right", overflow="fold")
    table.add_column("B", justify="right", overflow="fold")
    table.add_column("change", justify="right", no_wrap=True)
    for change in result.fact_changes:
        table.add_row(
            Text(change.name),
            Text(_fact_value(change, change.a)),
            Text(_fact_value(change, change.b)),
            Text(_fact_delta(change)),
        )
    return table


def _one_sided_facts(result: RunComparison) -> list[Text]:
    lines = []
    for side, names in (("A", result.facts_only_in_a), ("B", result.facts_only_in_b)):
        if not names:
            continue
        shown = ", ".join(names[:_MAX_NAMES])
        more = len(names) - _MAX_NAMES
        text = f"measured only in {side}: {shown}" + (f" and {more} more" if more > 0 else "")
        lines.append(Text(text, style="dim"))
    return lines


def _finding_line(finding: Finding) -> Text:
    text = Text(f"[{finding.severity}]", style=fmt.SEVERITY_STYLE.get(finding.severity, ""))
    text.append(" " + fmt.one_line(finding.title))
    text.append(f"  ({finding.rule_id})", style="dim")
    return text


def _findings(result: RunComparison) -> Table:
    table = Table(title="Findings", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("finding", overflow="fold", ratio=1)
    groups: list[tuple[str, list[Text]]] = [
        ("fixed in B", [_finding_line(f) for f in result.findings_fixed]),
        ("new in B", [_finding_line(f) for f in result.findings_introduced]),
        ("in both", [Text(rule_id) for rule_id in result.findings_kept]),
    ]
    for label, lines in groups:
        if not lines:
            table.add_row(label, Text(fmt.MISSING, style="dim"))
            continue
        for i, line in enumerate(lines):
            table.add_row(label if i == 0 else "", line)
    return table
