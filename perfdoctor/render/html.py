"""report.html: one self-contained file that reads offline and can be mailed or attached.

No script, no external stylesheet, font or image: CSS is inline and the charts are inline
SVG (render/charts.py: from matplotlib, or written directly where a trace's report draws
one). A Content-Security-Policy meta tag forbids every fetch, so even a mistake here could
not make the page reach the network. Every string that comes from a trace, a script or a
path goes through `esc` (html.escape with quotes).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from perfdoctor.model import Evidence, Finding, Recommendation, Report, SourceLocation
from perfdoctor.render import (
    batch_section,
    compute_section,
    gpu_view,
    history_section,
    loop_section,
    measurement,
    outcome,
    summary,
)
from perfdoctor.render import format as fmt
from perfdoctor.render.charts import Chart, build_charts
from perfdoctor.render.compile_section import compile_html
from perfdoctor.render.memory_section import CATEGORY_NOTE, memory_section
from perfdoctor.rundir import REPORT_JSON, REPORT_MD

# Nothing may be fetched: no scripts, no connections, no fonts; styles and data: images only.
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)

_CSS = """
:root {
  color-scheme: light dark;
  --bg: #f6f7f9; --card: #ffffff; --text: #1d2330; --muted: #5d6678; --line: #dfe3ea;
  --accent: #2f5fb3; --crit: #c0392b; --warn: #b7791f; --info: #2b7a98; --ok: #2e7d32;
  --code: #f0f2f5; --bar: #4c72b0;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #14171c; --card: #1d2128; --text: #e4e7ec; --muted: #9aa3b2; --line: #323844;
    --accent: #7aa7ff; --crit: #ff7b6b; --warn: #f0b44c; --info: #5cc3e6; --ok: #6fcf73;
    --code: #262b33; --bar: #7aa7ff;
  }
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif;
}
main { max-width: 1120px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 1.5rem; margin: 0 0 4px; }
h2 { font-size: 1.2rem; margin: 0 0 12px; }
h3 { font-size: 1.02rem; margin: 0 0 6px; }
code, pre, .mono {
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 0.88em;
}
pre { background: var(--code); padding: 10px 12px; border-radius: 6px; overflow-x: auto; }
.script { color: var(--muted); word-break: break-all; margin: 0 0 10px; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; }
.chip {
  border: 1px solid var(--line); border-radius: 999px; padding: 1px 10px; font-size: 0.85rem;
  color: var(--muted); background: var(--card);
}
section, .card {
  background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 16px 18px; margin: 16px 0;
}
.headline { border-left: 5px solid var(--accent); }
.headline dl { display: grid; grid-template-columns: max-content 1fr; gap: 6px 16px; margin: 0; }
.headline dt { font-weight: 600; }
.headline dd { margin: 0; }
.note { color: var(--warn); font-weight: 600; margin: 10px 0 0; }
.run-note { color: var(--muted); margin: 8px 0 0; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(320px, 100%), 1fr));
  gap: 18px; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; overflow-wrap: break-word; }
th { color: var(--muted); font-weight: 600; }
.id { white-space: nowrap; }  /* ids such as dataloader-workers read as one word */
td.num, th.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.barcol { display: inline-block; width: min(160px, 22vw); }  /* fits a phone's width */
.bar { background: var(--bar); height: 10px; border-radius: 3px; min-width: 2px; }
.wrap { overflow-x: auto; }
.finding { border-left: 4px solid var(--line); padding: 4px 0 4px 14px; margin: 14px 0; }
.finding.critical { border-left-color: var(--crit); }
.finding.warning { border-left-color: var(--warn); }
.finding.info { border-left-color: var(--info); }
.sev { font-size: 0.78rem; text-transform: uppercase; font-weight: 700; letter-spacing: 0.04em; }
.sev.critical { color: var(--crit); } .sev.warning { color: var(--warn); }
.sev.info { color: var(--info); }
.rule { color: var(--muted); font-size: 0.85rem; }
.loc { color: var(--accent); word-break: break-all; }
.muted { color: var(--muted); }
.verdict { font-weight: 700; }
.verdict.accepted { color: var(--ok); } .verdict.rejected { color: var(--warn); }
.verdict.failed { color: var(--crit); } .verdict.reference { color: var(--muted); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(480px, 100%), 1fr));
  gap: 16px; }
/* A warning is a sentence (or a traceback): wrapped, never cut off behind a scrollbar. */
.warnings pre { white-space: pre-wrap; overflow-wrap: anywhere; }
figure { margin: 0; }
figure .plot { background: #ffffff; border-radius: 8px; padding: 6px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-weight: 600; margin-bottom: 6px; }
.missing { color: var(--muted); font-style: italic; }
details summary { cursor: pointer; font-weight: 600; }
footer { color: var(--muted); font-size: 0.85rem; text-align: center; margin-top: 24px; }
"""


def esc(text: object) -> str:
    # Control and bidi characters shown escaped (fmt.printable): a U+202E in a trace's name
    # would otherwise reorder the page around it.
    return html.escape(fmt.printable(str(text)), quote=True)


def render_html(report: Report) -> str:
    title = summary.run_title(report)
    body = "\n".join(
        [
            _header(report),
            _headline(report),
            _step(report),
            _gpu(report),
            _memory(report),
            compute_section.html_block(report, esc, _table),
            batch_section.html_section(report),
            compile_html(report, esc),
            _ranks(report),
            _loop(report),
            _findings(report),
            _recommendations(report),
            "" if summary.is_trace(report) else _variants(report),
            "" if summary.is_trace(report) else _patch(report),
            _charts(_shown_charts(report)),
            history_section.html_section(report),
            _skipped(report),
            _warnings(report),
            _environment(report),
            _artifacts(report),
            _footer(report),
        ]
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>perfdoctor: {esc(fmt.one_line(title, 120))}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def _table(
    header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()
) -> str:
    """Cells are HTML already (escaped by the caller); `numeric` columns align right."""
    head = "".join(
        f'<th class="num">{h}</th>' if i in numeric else f"<th>{h}</th>"
        for i, h in enumerate(header)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="wrap">{table}</div>'


def _header(report: Report) -> str:
    if summary.is_trace(report):
        chips = [summary.device_text(report), summary.source_text(report)]
        if report.created_at:
            chips.append(report.created_at)
        chip_html = "".join(f'<span class="chip">{esc(c)}</span>' for c in chips)
        inputs = "".join(f"<li>{esc(p)}</li>" for p in report.inputs)
        return (
            "<header>"
            "<h1>perfdoctor diagnose</h1>"
            f'<p class="script mono">{esc(summary.run_title(report))}</p>'
            f'<div class="chips">{chip_html}</div>'
            f'<details><summary>input</summary><ul class="mono">{inputs}</ul></details>'
            "</header>"
        )
    chips = [
        summary.device_text(report),
        f"status: {report.status} (exit code {report.exit_code})",
    ]
    if report.created_at:
        chips.append(report.created_at)
    chip_html = "".join(f'<span class="chip">{esc(c)}</span>' for c in chips)
    return (
        "<header>"
        "<h1>perfdoctor report</h1>"
        f'<p class="script mono">{esc(summary.run_title(report))}</p>'
        f'<div class="chips">{chip_html}</div>'
        "</header>"
    )


def _headline(report: Report) -> str:
    head = summary.headline(report)
    note = f'<p class="note">{esc(head.status_note)}</p>' if head.status_note else ""
    note += "".join(f'<p class="run-note">{esc(n)}</p>' for n in head.run_notes)
    return (
        '<section class="headline"><h2>Diagnosis</h2><dl>'
        f"<dt>Slow</dt><dd>{esc(head.slow)}</dd>"
        f"<dt>Fix</dt><dd>{esc(head.fix)}</dd>"
        f"<dt>Measured</dt><dd>{esc(head.measured)}</dd>"
        f"</dl>{note}</section>"
    )


def _step(report: Report) -> str:
    figures = _table(
        ["measure", "value"],
        ([esc(k), esc(v)] for k, v in summary.step_rows(report)),
        numeric=(1,),
    )
    parts = summary.breakdown_rows(report.baseline.breakdown_ms)
    if parts:
        rows = [
            [
                esc(part),
                esc(fmt.ms(value)),
                esc(fmt.percent(share)),
                f'<div class="bar" style="width:{share * 100:.1f}%"></div>',
            ]
            for part, value, share in parts
        ]
        breakdown = _table(["part", "time", "share", '<span class="barcol"></span>'], rows, (1, 2))
    else:
        breakdown = f'<p class="missing">{esc(summary.breakdown_missing(report))}</p>'
    if not summary.has_steps(report):
        return f"<section><h2>{esc(summary.step_title(report))}</h2>{figures}</section>"
    return (
        f'<section><h2>{esc(summary.step_title(report))}</h2><div class="grid2">'
        f"<div>{figures}</div><div><h3>{esc(summary.breakdown_title(report))}</h3>{breakdown}</div>"
        "</div></section>"
    )


def _gpu(report: Report) -> str:
    if not gpu_view.has_gpu_view(report):
        return ""
    parts = ["<section><h2>GPU timeline</h2>"]
    window = gpu_view.window_text(report)
    if window:
        parts.append(f"<p>{esc(window)}. {esc(gpu_view.DEFINITIONS)}</p>")
    rows = [[esc(r.label), esc(r.value), esc(r.note)] for r in gpu_view.timeline_rows(report)]
    parts.append(_table(["where the GPU time went", "share", "meaning"], rows, numeric=(1,)))
    comm = [[esc(r.label), esc(r.value), esc(r.note)] for r in gpu_view.comm_rows(report)]
    if comm:
        parts.append(_table(["communication", "share", "meaning"], comm, numeric=(1,)))
    collectives = [[esc(c) for c in row] for row in gpu_view.collective_rows(report)]
    if collectives:
        parts.append(f"<h3{_SUB}>Collectives</h3>")
        columns = list(gpu_view.COLLECTIVE_COLUMNS)
        parts.append(_table(columns, collectives, numeric=(1, 2, 3, 4, 5)))
        parts.append(f'<p class="muted">{esc(gpu_view.COLLECTIVE_NOTE)}</p>')
    counts = gpu_view.count_text(report)
    if counts:
        parts.append(f"<p>{esc(counts)}.</p>")
    kernels = [
        [f"<code>{esc(k.name)}</code>", esc(k.count), esc(k.total_ms), esc(k.share), esc(k.kind)]
        for k in gpu_view.kernel_rows(report)
    ]
    if kernels:
        parts.append("<h3>Top kernels</h3>")
        parts.append(
            _table(["kernel", "count", "time", "share", "kind"], kernels, numeric=(1, 2, 3))
        )
    parts.append("</section>")
    return "\n".join(parts)


_SUB = ' style="margin-top: 18px"'  # space between the memory section's tables


def _memory(report: Report) -> str:
    section = memory_section(report)
    if section is None:
        return ""
    parts = ["<section><h2>GPU memory (CUDA memory snapshot)</h2>"]
    parts.append(_table(["measure", "value"], ([esc(m), esc(v)] for m, v in section.figures)))
    if section.categories:
        parts.append(f"<h3{_SUB}>What the peak holds</h3>")
        rows = ([esc(n), esc(b), esc(s)] for n, b, s in section.categories)
        parts.append(_table(["memory", "bytes", "share"], rows, numeric=(1, 2)))
        parts.append(f'<p class="muted">{esc(CATEGORY_NOTE)}</p>')
    for title, sites in (
        ("Allocated where: live at the peak", section.sites_at_peak),
        (f"Allocated where: whole history ({section.overall_total})", section.sites_overall),
    ):
        if not sites:
            continue
        parts.append(f"<h3{_SUB}>{esc(title)}</h3>")
        rows = ([f'<span class="loc">{esc(r.site)}</span>', *map(esc, r.cells())] for r in sites)
        header = ["site", "function", "bytes", "share", "blocks"]
        parts.append(_table(header, rows, numeric=(2, 3, 4)))
    parts.append('<p class="muted">The memory chart is under Charts.</p></section>')
    return "".join(parts)


def _ranks(report: Report) -> str:
    if not report.ranks:
        return ""
    rows = ([esc(c) for c in row] for row in summary.rank_rows(report))
    return (
        f"<section><h2>{esc(summary.ranks_title(report))}</h2>"
        + _table(list(summary.RANK_COLUMNS), rows, numeric=(2, 3, 4, 5, 6, 7))
        + f"<p>{esc(summary.rank_spread_text(report))}</p>"
        + f'<p class="muted">{esc(summary.rank_note(report))}</p></section>'
    )


def _loop(report: Report) -> str:
    rows = [[esc(c) for c in row] for row in loop_section.loop_rows(report)]
    if not rows:
        return ""
    verdict = esc(loop_section.loop_verdict(report))
    table = _table(list(loop_section.COLUMNS), rows, numeric=(1, 2))
    return f"<section><h2>{esc(loop_section.TITLE)}</h2>{table}<p>{verdict}</p></section>"


def _evidence_row(item: Evidence) -> list[str]:
    threshold = (
        f"{item.comparison} {fmt.scalar(item.threshold, fmt.unit_for(item.name, item.unit))}"
        if item.threshold is not None
        else fmt.MISSING
    )
    return [
        f"<code>{esc(item.name)}</code>",
        esc(fmt.scalar(item.value, fmt.unit_for(item.name, item.unit))),
        esc(threshold),
        esc(item.note),
    ]


def _locations(locs: Sequence[SourceLocation]) -> str:
    if not locs:
        return ""
    items = "".join(f'<li class="loc mono">{esc(fmt.location(loc))}</li>' for loc in locs)
    return f"<ul>{items}</ul>"


def _finding(rank: int, finding: Finding) -> str:
    sev = esc(finding.severity)
    parts = [
        f'<article class="finding {sev}">',
        f'<h3>{rank}. <span class="sev {sev}">{sev}</span> {esc(finding.title)} '
        f'<span class="rule mono">{esc(finding.rule_id)}</span></h3>',
        f"<p>{esc(finding.explanation)}</p>",
    ]
    if finding.evidence:
        parts.append(
            _table(
                ["evidence", "measured", "threshold", "note"],
                (_evidence_row(e) for e in finding.evidence),
                numeric=(1, 2),
            )
        )
    if finding.locations:
        parts.append(f'<p class="muted">Where in the code:</p>{_locations(finding.locations)}')
    gain = summary.gain_text(finding.gain)
    if finding.optimizations or gain:
        fix = ", ".join(f"<code>{esc(o)}</code>" for o in finding.optimizations) or fmt.MISSING
        parts.append(
            f"<p><strong>Fix:</strong> {fix}" + (f"; {esc(gain)}" if gain else "") + "</p>"
        )
    parts.append("</article>")
    return "".join(parts)


def _findings(report: Report) -> str:
    if not report.findings:
        return '<section><h2>Findings</h2><p class="muted">No rule fired on this run.</p></section>'
    items = "".join(_finding(i, f) for i, f in enumerate(report.findings, start=1))
    return f"<section><h2>Findings</h2>{items}</section>"


def _recommendation(rec: Recommendation) -> str:
    facts = [
        f"<strong>{label}:</strong> {esc(value)}"
        for label, value in summary.recommendation_facts(rec)
    ]
    conflicts = "".join(f"<li>Trade-off: {esc(c)}</li>" for c in rec.conflicts)
    code = f"<pre><code>{esc(rec.code_change)}</code></pre>" if rec.code_change else ""
    return (
        '<article class="card">'
        f'<h3>{esc(rec.title)} <span class="rule mono">{esc(rec.optimization_id)}</span></h3>'
        f"<p>{' · '.join(facts)}</p>"
        + (f"<ul>{conflicts}</ul>" if conflicts else "")
        + _locations(rec.locations)
        + code
        + "</article>"
    )


def _recommendations(report: Report) -> str:
    if not report.recommendations:
        return ""
    items = "".join(_recommendation(r) for r in report.recommendations)
    return f"<section><h2>Recommendations</h2>{items}</section>"


def _patch(report: Report) -> str:
    """fixes.patch: each change with its measured gain, the lines to add, the command."""
    patch = report.fix_patch or {}
    hunks, adds = patch.get("hunks") or [], patch.get("lines_to_add") or []
    if not hunks and not adds:
        return ""
    parts = ["<section><h2>Patch of the proven fixes</h2>"]
    if hunks:
        rows = "".join(
            f"<tr><td>{esc(h.get('file'))}:{esc(h.get('line'))}</td>"
            f"<td>{esc(h.get('optimization_id'))}</td><td>{esc(h.get('change'))}</td>"
            f"<td>{esc(h.get('gain'))}</td></tr>"
            for h in hunks
        )
        parts.append(
            f"<p>{esc(outcome.patch_path(report) or '')} changes:</p><table><thead><tr>"
            "<th>file:line</th><th>fix</th><th>change</th><th>measured</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    for add in adds:
        parts.append(
            f"<p>Add by hand ({esc(add.get('optimization_id'))}, measured "
            f"{esc(add.get('gain'))}; {esc(add.get('where'))}):</p>"
            f"<pre>{esc(add.get('line'))}</pre>"
        )
    command = patch.get("apply")
    if isinstance(command, str) and command:
        parts.append(
            "<p>Apply it (<code>patch -p1</code> from the same directory works too; "
            f"<code>-R</code> takes it back):</p><pre>{esc(command)}</pre>"
        )
    return "".join(parts) + "</section>"


def _variants(report: Report) -> str:
    if not report.variants:
        return (
            '<section><h2>Variants</h2><p class="muted">None measured: no runtime '
            "optimization was applied in this run.</p></section>"
        )
    header = ["variant", "applied", summary.PAIRED_STEP_HEADER, "speedup ± noise"]
    header += [summary.POOLED_P90_HEADER, "peak memory"]
    header += ["loss Δ", "verdict"]
    rows = [
        [
            f'<strong class="id">{esc(r.label)}</strong>',
            esc(r.applied),
            esc(r.step_p50),
            esc(r.speedup),
            esc(r.step_p90),
            esc(r.memory),
            esc(r.loss_delta),
            f'<span class="verdict {esc(r.verdict)}">{esc(r.verdict)}</span>'
            f'<br><span class="muted">{esc(r.reason)}</span>',
        ]
        for r in summary.variant_rows(report)
    ]
    return (
        "<section><h2>Variants</h2>"
        + _table(header, rows, numeric=(2, 3, 4, 5, 6))
        + f'<p class="muted">{esc(summary.VARIANTS_NOTE)} Loss Δ is the relative drift of '
        "the loss against the baseline with the same seed.</p>"
        + _measurement(report)
        + _applied_changes(report)
        + "</section>"
    )


def _measurement(report: Report) -> str:
    rows = [[esc(c) for c in measurement.cells(r)] for r in measurement.measurement_rows(report)]
    if not rows:
        return ""
    return (
        "<h3>How each fix was measured</h3>"
        + _table(list(measurement.HEADER), rows, numeric=(2, 3, 4, 5, 6, 7))
        + f'<p class="muted">{esc(measurement.NOTE)}</p>'
    )


def _applied_changes(report: Report) -> str:
    items = "".join(
        f"<li><code>{esc(opt_id)}</code>: {esc(detail)}</li>"
        for opt_id, detail in summary.applied_changes(report)
    )
    return f"<p>What the applied optimizations changed:</p><ul>{items}</ul>" if items else ""


def _shown_charts(report: Report) -> list[Chart]:
    charts = build_charts(report)
    # A trace recorded elsewhere never has samples or a loss: its empty charts are noise.
    return [c for c in charts if c.svg] if summary.is_trace(report) else charts


def _charts(charts: list[Chart]) -> str:
    if not charts:
        return ""
    figures = []
    for chart in charts:
        if chart.svg:
            body = f'<div class="plot">{chart.svg}</div>'
        else:
            body = f'<p class="missing">{esc(chart.missing)}</p>'
        figures.append(
            f'<figure id="chart-{esc(chart.key)}"><figcaption>{esc(chart.title)}</figcaption>'
            f"{body}</figure>"
        )
    return f'<section><h2>Charts</h2><div class="charts">{"".join(figures)}</div></section>'


def _skipped(report: Report) -> str:
    if not report.skipped_rules:
        return ""
    rows = ([f"<code>{esc(s.rule_id)}</code>", esc(s.reason)] for s in report.skipped_rules)
    return (
        f"<section><details><summary>{esc(summary.skipped_summary(report))}</summary>"
        f"{_table(['rule', 'why'], rows)}</details></section>"
    )


def _warnings(report: Report) -> str:
    if not report.warnings:
        return ""
    items = "".join(f"<li><pre>{esc(w)}</pre></li>" for w in report.warnings)
    return f'<section><h2>Warnings</h2><ul class="warnings">{items}</ul></section>'


def _environment(report: Report) -> str:
    rows = [["device", esc(summary.device_text(report))]]
    rows += [[esc(k), esc(v)] for k, v in sorted(report.versions.items())]
    facts = ""
    if report.facts:
        fact_rows = (
            [f"<code>{esc(k)}</code>", esc(fmt.scalar(v))] for k, v in sorted(report.facts.items())
        )
        facts = (
            f"<details><summary>{len(report.facts)} measured facts</summary>"
            f"{_table(['fact', 'value'], fact_rows, numeric=(1,))}</details>"
        )
    return f"<section><h2>Environment</h2>{_table(['', ''], rows)}{facts}</section>"


def _artifacts(report: Report) -> str:
    rows = [
        [esc(k), f'<span class="mono loc">{esc(v)}</span>']
        for k, v in summary.artifact_rows(report)
    ]
    if not rows:
        return ""
    hint = (
        f'<p class="muted">The same report as Markdown ({esc(REPORT_MD)}) and JSON '
        f"({esc(REPORT_JSON)}) sits next to this file.</p>"
    )
    return f"<section><h2>Artifacts</h2>{_table(['artifact', 'where'], rows)}{hint}</section>"


def _footer(report: Report) -> str:
    version = report.versions.get("perfdoctor", "")
    made = f"perfdoctor {version}".strip()
    return f"<footer>Generated by {esc(made)} · schema {report.schema_version}</footer>"
