"""The brief: a report short enough for a coding agent or a CI log (at most ~40 lines).

`brief_data` picks what an agent acts on out of the same Report that report.json is written
from (the headline with its evidence and the user's source lines, the verdicts with their
interval, load and method, the fixes.patch path), so every number in it is the number in
report.json; `render_brief` words that data as text (`perfdoctor report RUN -f brief`, and the
text of every MCP tool's answer). Numbers in the text are the JSON values at 3 significant
figures (`number`), nothing recomputed.
"""

from __future__ import annotations

import linecache
import os
from typing import Any

from perfdoctor.model import Evidence, Finding, Report, SourceLocation, VariantResult
from perfdoctor.optimize.verdicts import undecided
from perfdoctor.render import format as fmt
from perfdoctor.render import summary
from perfdoctor.rundir import FIXES_PATCH, REPORT_JSON

BRIEF_VERSION = 1
# Findings shown, each with its first source line: the rest are in report.json.
TOP_FINDINGS = 5
# Verdicts shown: every single fix and the stack fit in this on any catalog run so far.
MAX_VERDICTS = 8
# A line longer than this is cut: the headline sentences can carry a whole verdict reason.
LINE_LIMIT = 220


def number(value: object) -> str:
    """A JSON value as the brief's text shows it: a float at 3 significant figures, an int
    whole, anything else (an evidence value may be text) as it is."""
    if value is None:
        return fmt.MISSING
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def decision(variant: VariantResult) -> str:
    """accepted / rejected / failed, or `undecided`: rejected as within the noise while the
    interval is still too wide to call it no gain (more pairs would decide it)."""
    return "undecided" if undecided(variant) else variant.verdict


def _code(loc: SourceLocation, source_root: str | None) -> str | None:
    # The user's line itself, so an agent can find it without opening the file; None when
    # the file is not on this machine (a report copied from elsewhere). A relative path is
    # relative to the directory the script ran in (`source_root`, else the current one).
    path = os.path.join(source_root, loc.file) if source_root else loc.file
    if not loc.file or loc.line <= 0 or not os.path.isfile(path):
        return None
    text = linecache.getline(path, loc.line).strip()
    return text or None


def _location(loc: SourceLocation, source_root: str | None) -> dict[str, Any]:
    return {
        "file": loc.file,
        "line": loc.line,
        "function": loc.function,
        "code": _code(loc, source_root),
        "share": loc.share,
        "count": loc.count,
    }


def _evidence(item: Evidence) -> dict[str, Any]:
    return {
        "name": item.name,
        "value": item.value,
        "threshold": item.threshold,
        "comparison": item.comparison,
        "unit": fmt.unit_for(item.name, item.unit),
    }


def _finding(f: Finding, source_root: str | None = None) -> dict[str, Any]:
    return {
        "rule_id": f.rule_id,
        "severity": f.severity,
        "title": f.title,
        "evidence": [_evidence(e) for e in f.evidence],
        "locations": [_location(loc, source_root) for loc in f.locations],
        "optimizations": list(f.optimizations),
        "expected_step_time_frac": f.gain.step_time_frac,
    }


def verdict_data(v: VariantResult) -> dict[str, Any]:
    return {
        "label": v.label,
        "optimizations": list(v.optimizations),
        "verdict": v.verdict,
        "decision": decision(v),
        "speedup": v.speedup,
        "interval": list(v.interval) if v.interval is not None else None,
        "confidence": v.confidence,
        "method": v.method,
        "pairs": v.pairs,
        "load": v.load,
        "baseline_step_ms_p50": v.baseline_step_ms_p50,
        "step_ms_p50": v.step_ms_p50,
        "loss_delta": v.loss_delta,
        "reason": v.reason,
        "peel_of": v.peel_of,
    }


def patch_path(report: Report) -> str | None:
    """The session's fixes.patch when it exists: the accepted fixes as a diff of the user's
    files, to apply rather than retype."""
    if not report.run_dir or summary.is_trace(report):
        return None
    path = os.path.join(report.run_dir, FIXES_PATCH)
    return path if os.path.isfile(path) else None


def _report_json(report: Report) -> str | None:
    path = os.path.join(report.run_dir, REPORT_JSON) if report.run_dir else ""
    return path if path and os.path.isfile(path) else None


def brief_data(report: Report, source_root: str | None = None) -> dict[str, Any]:
    """What an agent acts on, as plain JSON values taken from the Report unchanged.
    `source_root`: the directory the script ran in, for source paths that are relative."""
    head = summary.headline(report)
    lead = summary.lead_finding(report) if report.findings else None
    findings = summary.step_findings(report)
    base = report.baseline
    return {
        "brief_version": BRIEF_VERSION,
        "source": report.source,
        "script": report.script,
        "argv": list(report.argv),
        "status": report.status,
        "exit_code": report.exit_code,
        "run_dir": report.run_dir,
        "report_json": _report_json(report),
        "step_ms_p50": base.step_ms_p50,
        "step_ms_p90": base.step_ms_p90,
        "throughput_samples_s": base.throughput_samples_s,
        "headline": {
            "slow": head.slow,
            "fix": head.fix,
            "measured": head.measured,
            "status_note": head.status_note,
            "finding": _finding(lead, source_root) if lead is not None else None,
        },
        "findings": [_finding(f, source_root) for f in findings[:TOP_FINDINGS]],
        "more_findings": max(0, len(findings) - TOP_FINDINGS),
        "verdicts": [verdict_data(v) for v in report.variants],
        "accepted": [v.label for v in report.variants if v.verdict == "accepted"],
        "fixes_patch": patch_path(report),
    }


def _first_number(f: dict[str, Any]) -> str:
    """The finding's first evidence, as report.json holds it (a fraction stays a fraction)."""
    for item in f["evidence"]:
        value = item["value"]
        if value is None:
            continue
        shown = fmt.scalar(value) if isinstance(value, bool) else number(value)
        if item["unit"] and item["unit"] != "frac" and not isinstance(value, bool):
            shown += f" {item['unit']}"
        limit = item["threshold"]
        if isinstance(limit, (int, float)) and not isinstance(limit, bool):
            shown += f" ({item['comparison'] or 'vs'} {number(limit)})"
        return f"{item['name']} = {shown}"
    return ""


def _where(f: dict[str, Any]) -> str:
    if not f["locations"]:
        return ""
    loc = f["locations"][0]
    text = f"{loc['file']}:{loc['line']}"
    return f"{text}: {loc['code']}" if loc["code"] else text


def verdict_line(v: dict[str, Any]) -> str:
    text = f"{v['label']}: {v['decision']}"
    if v["speedup"] is not None:
        text += f", {number(v['speedup'])}x"
        if v["interval"]:
            low, high = v["interval"]
            text += f" [{number(low)}, {number(high)}]"
    how = [v["method"]]
    if v["pairs"]:
        how.append(f"{v['pairs']} pairs")
    text += f" ({', '.join(how)})"
    if v["load"]:
        text += f"; load: {v['load']}"
    return text


def _cut(text: str, indent: int = 0) -> str:
    return " " * indent + fmt.one_line(text, LINE_LIMIT - indent)


def brief_lines(data: dict[str, Any]) -> list[str]:
    cut = _cut
    command = " ".join([os.path.basename(data["script"]), *data["argv"]]).strip()
    lines = [f"perfdoctor brief: {command} ({data['status']}, exit {data['exit_code']})"]
    if data["step_ms_p50"] is not None:
        lines.append(
            f"step p50 {number(data['step_ms_p50'])} ms, p90 {number(data['step_ms_p90'])} ms"
        )
    head = data["headline"]
    lines.append(cut(f"slow: {head['slow']}"))
    lines.append(cut(f"fix: {head['fix']}"))
    lines.append(cut(f"measured: {head['measured']}"))
    if head["status_note"]:
        lines.append(cut(f"note: {head['status_note']}"))
    if data["findings"]:
        lines.append("findings:")
        for i, f in enumerate(data["findings"], 1):
            fixes = f" -> {', '.join(f['optimizations'])}" if f["optimizations"] else ""
            said = f"{i}. {f['rule_id']} ({f['severity']}): {_first_number(f)}{fixes}"
            lines.append(cut(said, 2))
            where = _where(f)
            if where:
                lines.append(cut(f"at {where}", 5))
        if data["more_findings"]:
            lines.append(f"  (+{data['more_findings']} more in report.json)")
    verdicts = data["verdicts"]
    if verdicts:
        lines.append("verdicts:")
        lines.extend(cut(verdict_line(v), 2) for v in verdicts[:MAX_VERDICTS])
        if len(verdicts) > MAX_VERDICTS:
            lines.append(f"  (+{len(verdicts) - MAX_VERDICTS} more in report.json)")
    if data["source"] == "run":
        lines.append(f"patch: {data['fixes_patch'] or 'none (no accepted fix written as a diff)'}")
    if data["report_json"]:
        lines.append(f"report: {data['report_json']}")
    return lines


def render_brief(report: Report) -> str:
    return "\n".join(brief_lines(brief_data(report))) + "\n"
