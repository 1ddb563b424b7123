"""What the MCP tools do, without the MCP SDK: each takes plain arguments, keeps every path
under the root the server was started with, and returns plain JSON values plus the brief's
text. A user error raises a PerfdoctorError (its one line is the tool error the agent reads).

The server (mcp_server.py) only wires these to the protocol; the tests can call them directly.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfdoctor.errors import TargetNotFound, UsageError
from perfdoctor.handover import sessions
from perfdoctor.model import Report
from perfdoctor.rundir import REPORT_HTML, REPORT_JSON, REPORT_MD

REPORT_FORMATS = ("brief", "json", "md", "html")


class OutsideRoot(UsageError):
    """A path outside the directory the server may touch."""


@dataclass(frozen=True)
class Answer:
    """A tool's answer: the structured JSON, and the text an agent reads first."""

    data: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Workspace:
    """The root the server runs scripts and reads runs under, and where sessions go."""

    root: Path
    out: Path

    @classmethod
    def at(cls, root: Path, out: Path | None = None) -> Workspace:
        root = root.resolve()
        if not root.is_dir():
            raise TargetNotFound(f"--root {root} is not a directory")
        out = (out if out is not None else root / "perfdoctor-runs").resolve()
        return cls(root, out)

    def path(self, given: str, what: str = "path") -> Path:
        """`given` (absolute, or relative to the root) resolved, links followed, and refused
        unless it lies under the root or the --out directory."""
        if not given or not given.strip():
            raise UsageError(f"no {what} given")
        raw = Path(given).expanduser()
        full = (raw if raw.is_absolute() else self.root / raw).resolve()
        if not any(full == base or base in full.parents for base in (self.root, self.out)):
            raise OutsideRoot(
                f"{what} {given} is outside the root {self.root}",
                hint="this server only reads and runs files under its --root",
            )
        if not full.exists():
            raise TargetNotFound(f"{what} {given} does not exist (looked at {full})")
        return full

    def run_path(self, given: str, script: str | None = None) -> Path:
        """A run: `latest`, `previous` (of `script`) or a path."""
        if given in sessions.RUN_ALIASES:
            return sessions.resolve_alias(given, self.out, self.script_key(script))
        return self.path(given, "run")

    def script_key(self, script: str | None) -> str | None:
        """`script` as the history matches it: the absolute path of a file under the root
        (the server's own directory is no reference), else the name as given."""
        if not script:
            return None
        under_root = (self.root / script).resolve()
        return str(under_root) if under_root.is_file() else script

    def script(self, given: str) -> Path:
        path = self.path(given, "script")
        if not path.is_file():
            raise UsageError(f"script {given} is not a file")
        return path


def answer(report: Report, source_root: Path | None = None, **extra: Any) -> Answer:
    """The brief of `report`; relative source paths are read from `source_root` (the
    directory profile ran the script in: the root)."""
    from perfdoctor.render.brief import brief_data, brief_lines

    data = brief_data(report, str(source_root) if source_root else None)
    data.update(extra)
    return Answer(data, "\n".join(brief_lines(data)) + "\n")


def diagnose(ws: Workspace, paths: list[str]) -> Answer:
    """Traces, logdirs or memory snapshots recorded anywhere under the root; the reports go
    under <out>/diagnose/."""
    from perfdoctor.diagnose_traces import diagnose_traces, write_trace_reports

    if not paths:
        raise UsageError("no path given: a trace file, a logdir or a memory snapshot")
    inputs = [ws.path(p, "trace") for p in paths]
    done = diagnose_traces(inputs, ws.out / "diagnose" / _stamp())
    reports, errors = [], []
    for item in done:
        if item.report is None:
            errors.append(f"{item.run.name}: {item.error}")
            continue
        write_trace_reports(item.report)
        reports.append(item.report)
    if not reports:
        raise UsageError("nothing could be diagnosed: " + "; ".join(errors))
    first = answer(reports[0])
    if len(reports) == 1:
        if errors:
            first.data["errors"] = errors
        return first
    parts = [answer(r) for r in reports]
    data = {"runs": [p.data for p in parts], "errors": errors}
    return Answer(data, "\n".join(p.text for p in parts))


def _stamp() -> str:
    import time

    return time.strftime("%Y%m%d-%H%M%S") + f"-{time.monotonic_ns() % 1_000_000:06d}"


def report(ws: Workspace, run: str = "latest", fmt: str = "brief") -> Answer:
    """A session's report, re-analysed and its files rewritten, in `fmt`: brief or json as
    text; md and html as the file written in the session (html is too large to hand over)."""
    from perfdoctor.diagnose import (
        analyze_session,
        is_lone_child_run,
        resolve_session_dir,
        write_reports,
    )

    if fmt not in REPORT_FORMATS:
        raise UsageError(f"format must be one of {', '.join(REPORT_FORMATS)}, not {fmt!r}")
    session_dir = resolve_session_dir(ws.run_path(run))
    built = analyze_session(session_dir)
    if not is_lone_child_run(session_dir):
        built = write_reports(session_dir, built).report
    result = answer(built, ws.root)
    files = {name: str(session_dir / name) for name in (REPORT_JSON, REPORT_MD, REPORT_HTML)}
    result.data["report_files"] = {k: v for k, v in files.items() if Path(v).is_file()}
    if fmt == "brief":
        return result
    if fmt == "json":
        from perfdoctor.render.json_report import render_json

        return Answer(result.data, render_json(built))
    written = session_dir / (REPORT_MD if fmt == "md" else REPORT_HTML)
    if fmt == "md" and written.is_file():
        return Answer(result.data, written.read_text(encoding="utf-8"))
    return Answer(result.data, result.text + f"{fmt} report: {written}\n")


def compare(
    ws: Workspace,
    run_a: str,
    run_b: str,
    fail_if_slower: float | None = None,
    fail_if_more_memory: float | None = None,
    strict: bool = False,
    script: str | None = None,
) -> Answer:
    """`perfdoctor compare A B` with the gate's limits; A and B may be `previous`/`latest`."""
    from perfdoctor.cli import _gate_limits
    from perfdoctor.optimize.compare_runs import compare_sides, load_side, script_display
    from perfdoctor.optimize.regression_gate import evaluate_gate, gate_samples
    from perfdoctor.render.comparison_output import Compared, render_compared_json

    limits = _gate_limits(fail_if_slower, fail_if_more_memory, strict)
    side_a = load_side(ws.run_path(run_a, script))
    side_b = load_side(ws.run_path(run_b, script))
    result = compare_sides(side_a, side_b)
    gate = (
        evaluate_gate(
            gate_samples(side_a.records),
            gate_samples(side_b.records),
            limits,
            script_display(side_b.records[0]),
        )
        if limits.any
        else None
    )
    from perfdoctor.render.brief import verdict_data, verdict_line

    data = json.loads(render_compared_json(Compared(result, gate)))
    data["brief_verdict"] = verdict_data(result.verdict)
    lines = [
        f"compare {run_a} -> {run_b}: {verdict_line(data['brief_verdict'])}",
        f"reason: {result.verdict.reason}",
    ]
    lines += [f"fixed: {f.rule_id}" for f in result.findings_fixed]
    lines += [f"new: {f.rule_id}" for f in result.findings_introduced]
    if gate is not None:
        data["gate_exit_code"] = gate.exit_code
        lines.append(f"gate: {gate.outcome} (exit {gate.exit_code}): {gate.summary}")
        if gate.hint:
            lines.append(f"to decide it: {gate.hint}")
    return Answer(data, "\n".join(lines) + "\n")


def explain(item_id: str) -> Answer:
    """One rule or optimization: thresholds and their sources, what the fix changes."""
    from perfdoctor.optimize.catalog import describe_optimizations
    from perfdoctor.rules import describe_rules

    rules: dict[str, dict[str, Any]] = {str(r["id"]): dict(r) for r in describe_rules()}
    optimizations = {str(o["id"]): o for o in describe_optimizations()}
    if item_id in rules:
        rule = rules[item_id]
        fixes = [optimizations[o] for o in rule.get("optimizations") or () if o in optimizations]
        data = {"kind": "rule", "rule": rule, "fixes": fixes}
        text = [
            f"rule {item_id}: {rule['title']}",
            f"needs: {', '.join(map(str, rule.get('needs') or ())) or '-'}",
            f"thresholds: {json.dumps(rule.get('thresholds'), default=str)}",
            f"source: {rule.get('source')}",
        ]
        text += [f"fix {f['id']} ({f['kind']}): {f['code_change']}" for f in fixes]
        return Answer(_plain(data), "\n".join(text) + "\n")
    if item_id in optimizations:
        opt = optimizations[item_id]
        addressed = [r for r in rules.values() if item_id in (r.get("optimizations") or ())]
        data = {"kind": "optimization", "optimization": opt, "addresses": addressed}
        text = [
            f"optimization {item_id} ({opt['kind']}): {opt['title']}",
            f"applies when: {opt['applies_when']}",
            f"what it changes by hand: {opt['code_change']}",
            f"risk: {opt['risk']}",
            f"verified by: {opt['verify']}; numerics: {opt['numerics_tolerance']} "
            f"(tolerance {opt['tolerance']})",
            f"addresses rules: {', '.join(str(r['id']) for r in addressed) or '-'}",
        ]
        return Answer(_plain(data), "\n".join(text) + "\n")
    close = difflib.get_close_matches(item_id, [*rules, *optimizations], n=3)
    raise UsageError(
        f"unknown rule or optimization id {item_id!r}"
        + (f"; did you mean {', '.join(close)}?" if close else ""),
        hint="`perfdoctor rules` and `perfdoctor optimizations` list them",
    )


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def history(ws: Workspace, script: str | None = None, limit: int = 20) -> Answer:
    """The sessions under --out, newest first (of one script when given): the rows of
    `perfdoctor history`, with each session's fixes.patch."""
    if limit < 1:
        raise UsageError(f"limit must be at least 1, not {limit}")
    rows = sessions.session_rows(ws.out, ws.script_key(script))
    shown = rows[:limit]
    data = {"out": str(ws.out), "sessions": shown, "total": len(rows)}
    lines = [f"{len(rows)} session(s) under {ws.out}" + (f" of {script}" if script else "")]
    for row in shown:
        p50 = f"{row['step_ms_p50']:.3g} ms" if row["step_ms_p50"] is not None else "-"
        fixes = ", ".join(row["accepted_fixes"]) or "none"
        commit = f" @{row['git_commit'][:10]}" if row.get("git_commit") else ""
        patch = f"; patch {row['fixes_patch']}" if row["fixes_patch"] else ""
        lines.append(
            f"  {row['created_at'][:16]} {Path(row['script']).name} {' '.join(row['argv'])}"
            f"{commit}: {row['status']}, step p50 {p50}; {row['headline']}; accepted: {fixes}"
            f"{patch} ({row['path']})"
        )
    return Answer(data, "\n".join(lines) + "\n")


def check_optimization_ids(ids: list[str] | None, option: str) -> None:
    from perfdoctor.optimize.catalog import unknown_ids

    if not ids:
        return
    unknown = unknown_ids(ids)
    if unknown:
        raise UsageError(
            f"{option}: unknown optimization id {', '.join(unknown)}",
            hint="`perfdoctor optimizations` (or the explain tool) lists them",
        )
