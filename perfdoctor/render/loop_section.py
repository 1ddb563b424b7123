"""The report's "Where the loop's time goes" section: the whole loop's wall time, the timed
steps' share of it, and the named costs outside them (Report.loop, analyze/loop_account.py).

Shown when the loop did something besides training (evaluation or no_grad forwards, torch.save,
long steps); a loop that only trains has nothing to account for beyond the step table. Each
renderer lays out the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfdoctor.model import Report
from perfdoctor.render import format as fmt

TITLE = "Where the loop's time goes"
# A timed step this share of the loop's time per step or more stands for it (1 - the 20%
# of the loop the loop-work rule flags, analyze/loop_account.py LONG_SHARE_FLAG).
REPRESENTS_MIN_SHARE = 0.8
COLUMNS = ("part", "time", "share of the loop")
COST_NAMES = {
    "compile_ms": "torch.compile compiling (compile.json)",
    "eval_forward_ms": "evaluation (model.eval() forwards)",
    "nograd_forward_ms": "no_grad forwards in train mode (rollouts, generation)",
    "save_ms": "checkpointing (torch.save)",
    "other_ms": "other code in the long steps (environment, logging, callbacks)",
    "starting_process_ms": "the starting process's forwards, no training (a test loop)",
}


def has_loop_section(report: Report) -> bool:
    loop = report.loop
    return bool(loop) and bool(loop.get("long_steps") or loop.get("costs_ms"))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _span(pair: Any) -> str:
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return f"steps {pair[0]}-{pair[1]}"
    return fmt.MISSING


def loop_rows(report: Report) -> list[tuple[str, str, str]]:
    """(part, time, share of the loop) rows; [] when the section is not shown."""
    if not has_loop_section(report):
        return []
    loop: Mapping[str, Any] = report.loop
    total = _num(loop.get("loop_ms")) or 0.0

    def share(value: float | None) -> str:
        if value is None or total <= 0:
            return fmt.MISSING
        if value > total * (1.0 + 1e-6):
            # A part larger than the loop it is a part of is a bug upstream: say so, do not
            # print a share above 100%.
            return "exceeds the loop (not shown)"
        return fmt.percent(value / total)

    steps = loop.get("steps")
    rows = [
        (
            f"the loop's steps ({steps} steps)",
            fmt.ms(total),
            "100%",
        ),
    ]
    per_step = _num(loop.get("loop_step_ms_mean"))
    timed = _num(loop.get("timed_step_ms_p50"))
    timed_share = _num(loop.get("timed_share"))
    rows.append(
        (
            f"a timed step ({_span(loop.get('timed_steps'))}, median) against the loop's "
            f"{fmt.ms(per_step)} per step",
            fmt.ms(timed),
            fmt.percent(timed_share, 0) + " of a loop step" if timed_share is not None else "",
        )
    )
    costs = loop.get("costs_ms") or {}
    for key, name in COST_NAMES.items():
        value = _num(costs.get(key))
        if value:
            # The starting process's time is not in the lead's loop: no share of it.
            apart = key == "starting_process_ms"
            rows.append((name, fmt.ms(value), "another process" if apart else share(value)))
    for code in loop.get("long_code") or ():
        if isinstance(code, Mapping) and code.get("text"):
            rows.append((f"in the long steps: {code['text']}", "", ""))
    startup = _num(loop.get("first_step_startup_ms"))
    if startup:
        compiled = _num((loop.get("startup_costs_ms") or {}).get("compile_ms"))
        rows.append(
            (
                "first step's one-off start-up (not repeated)"
                + (
                    f", {fmt.ms(min(compiled, startup))} of it torch.compile compiling "
                    "(compile.json)"
                    if compiled
                    else ""
                ),
                fmt.ms(startup),
                share(startup),
            )
        )
    setup = _num(loop.get("setup_ms"))
    if setup is not None:
        rows.append(
            ("before the first step (start-up, imports, data and model set-up)", fmt.ms(setup), "")
        )
    return rows


def loop_verdict(report: Report) -> str:
    """One sentence: whether the timed steps stand for the loop, with the long steps."""
    loop: Mapping[str, Any] = report.loop
    longs = [ls for ls in loop.get("long_steps") or () if isinstance(ls, Mapping)]
    period = loop.get("period")
    where = ", ".join(str(ls.get("index")) for ls in longs[:6])
    recur = f", every {period} steps" if isinstance(period, int) else ""
    seen = f"Long steps (3x a timed step or more): {where}{recur}. " if longs else ""
    odd = loop.get("unexplained_long_steps")
    if isinstance(odd, int) and odd:
        seen += (
            f"{odd} other step(s) were as long with no evaluation, no_grad forward or "
            "torch.save in them (jitter, or code perfdoctor does not name). "
        )
    if loop.get("representative", True):
        timed_share = _num(loop.get("timed_share"))
        if timed_share is not None and timed_share < REPRESENTS_MIN_SHARE:
            # Long steps with nothing named in them still make a loop step longer than a
            # timed one: "represent" beside "14% of a loop step" contradicts itself.
            return seen + (
                f"A timed step is {fmt.percent(timed_share, 0)} of the loop's time per step: "
                "the rest is in long steps perfdoctor could not name, so the step figures "
                "describe the short steps only."
            )
        return seen + "The timed steps represent the loop's time."
    share = _num(loop.get("long_share"))
    return (
        seen + f"They hold {fmt.percent(share, 0)} of the loop's wall time, and the step figures "
        "(medians of the timed steps) leave them out: they describe only the steps between "
        "them (see the warnings)."
    )


def headline_note(report: Report) -> str | None:
    """For the diagnosis panel, when the timed steps do not stand for the loop."""
    loop: Mapping[str, Any] = report.loop
    if not loop or loop.get("representative", True):
        return None
    share = _num(loop.get("long_share"))
    longs = [ls for ls in loop.get("long_steps") or () if isinstance(ls, Mapping)]
    costs: dict[str, float] = {}
    for ls in longs:
        for key, value in (ls.get("costs_ms") or {}).items():
            costs[key] = costs.get(key, 0.0) + float(value)
    lead = max(costs, key=lambda k: costs[k]) if costs else None
    mostly = f", mostly {COST_NAMES.get(lead, lead)}" if lead else ""
    code = [c for c in loop.get("long_code") or () if isinstance(c, Mapping) and c.get("text")]
    if code:
        mostly += f", where the main thread was in {code[0]['text']}"
    if loop.get("recurs") is False:
        return (
            f"The first step held {fmt.percent(share, 0)} of these steps' wall time{mostly}; "
            "it did not come back in this run, so whether the loop repeats it (an evaluation "
            "every N steps, a rollout per update) or not (a one-off) is unknown: time more "
            "steps (--steps)."
        )
    return (
        f"The step figures leave out {fmt.percent(share, 0)} of the loop's wall time: rare "
        f"long steps{mostly}. The findings describe the steps between them."
    )
