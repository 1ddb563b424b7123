"""compile.json + the trace's compiled regions -> the ranked list a user who switched on
torch.compile and saw no speedup wants: each graph break and recompile at their line, what
it costs per step, and its fix.

Prices, both measured in the run:
- a graph break: the eager time per step between compiled graphs charged to the frame the
  break ended (analyze/trace_compiled.py), summed over every compile of that frame;
- a recompile: the compile seconds (dynamo + backend, forward and backward) spent in the
  measured steps, per measured step. Recompiles that a train/eval switch causes compile
  one graph per mode, once: reported, not priced as a cost inside training.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfdoctor import run_schema, rundir
from perfdoctor.analyze.compile_fixes import (
    DISABLED_CAUSE,
    break_fix,
    cudagraph_fix,
    recompile_fix,
)
from perfdoctor.analyze.trace_compiled import CompiledRegions
from perfdoctor.errors import CorruptArtifact, one_line_message

Kind = Literal["graph_break", "recompile", "cudagraph_skip", "recompile_limit"]
_BREAK_AT = re.compile(r"Graph break in user code at (.+):(\d+)\s*$", re.M)
_REASON = re.compile(r"Graph Break Reason: .*\n\n?(.+)")
# "2/0: self.step == 0   # h = h * self.step  # file.py:57 in fn"
_GUARD = re.compile(r"^(\d+/\d+): (.+?)(?:\s{2,}#\s*(.*?))?$", re.M)
_LOC = re.compile(r"File \"(.+)\", line (\d+)")


@dataclass(frozen=True)
class CompileIssue:
    kind: Kind
    cause: str  # short: "Tensor.item() in the compiled code"
    reason: str  # dynamo's one-line reason, or the failed guard
    file: str | None
    line: int | None
    code: str | None  # the user's line as written
    fix: str
    rewritten: str | None  # the line with the fix written out
    compiles: int  # times dynamo logged it (one per compile of the frame)
    per_step: float | None  # how often per measured step (region entries, recompiles)
    cost_ms_per_step: float | None  # None: not priced (no trace, or not a cost)
    cost_basis: str  # how it was priced
    compile_s: float = 0.0  # compile seconds it caused over the whole run
    compile_ids: tuple[str, ...] = ()
    # The price is an upper bound of what removing it buys, not an estimate (a disable'd
    # helper: its ops still run once the break is gone, compiled).
    cost_is_bound: bool = False
    # The price is smaller than the run resolves (CompileDiagnosis.noise_ms): not ranked.
    below_noise: bool = False

    @property
    def where(self) -> str:
        if self.file is None:
            return "?"
        return f"{Path(self.file).name}:{self.line}" if self.line else Path(self.file).name


@dataclass(frozen=True)
class CompileDiagnosis:
    issues: tuple[CompileIssue, ...]
    frames_compiled: int
    recompiles: int
    graph_breaks: int  # distinct break sites
    compile_s_total: float
    compile_s_in_measured_steps: float
    measured_steps: int
    compiled_ms_per_step: float | None  # in graph calls
    eager_ms_per_step: float | None  # between graphs, all breaks together
    cudagraph_skips: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    # What the timed steps resolve: the half-width of the median step's ~95% interval
    # (noise_floor_ms). A price below it is reported as below the noise, not ranked.
    noise_ms: float | None = None
    recompile_limit: int | None = None  # as the script left it (compile.json)
    recompile_limit_hit: bool = False  # dynamo warned that a frame reached it
    # Frames whose compile failed (dynamo's fail_type): they ran eager, though counted among
    # frames_compiled; the first failure, one line.
    frames_failed: int = 0
    failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["issues"] = [{**asdict(i), "where": i.where} for i in self.issues]
        return out


FAILURE_TEXT_MAX = 300  # characters of a compile failure's reason shown
DEFAULT_RECOMPILE_LIMIT = 8  # torch._dynamo.config.recompile_limit's default (2.x)
# McGill, Tukey & Larsen (1978), "Variations of box plots": the notch of a box plot,
# median +- 1.58 IQR / sqrt(n), is a ~95% interval of the median.
NOTCH = 1.58


def noise_floor_ms(step_ms: Sequence[float]) -> float | None:
    """Half-width of the median step's ~95% interval (the box-plot notch): the smallest
    per-step cost the run's timed steps resolve. None with fewer than 4 steps."""
    values = sorted(v for v in step_ms if v == v)
    n = len(values)
    if n < 4:
        return None
    q1, q3 = values[(n - 1) // 4], values[(3 * (n - 1)) // 4]
    return NOTCH * (q3 - q1) / n**0.5


def load_compile_log(run_dir: Path) -> run_schema.CompileLog | None:
    path = Path(run_dir) / rundir.COMPILE_FILE
    if not path.is_file():
        return None
    try:
        return run_schema.compile_log(rundir.read_json(path))
    except (run_schema.SchemaMismatch, ValueError, CorruptArtifact):
        return None


def _frame_of(cid: str | None) -> str:
    return (cid or "?").split("/")[0]


def _first_reason(text: str) -> str:
    m = _REASON.search(text)
    line = m.group(1) if m else text.splitlines()[0] if text else ""
    return line.strip()


def diagnose_compile(
    log: run_schema.CompileLog,
    regions: CompiledRegions | None,
    measured_steps: Sequence[int] = (),
    profiled_scale: float | None = None,
    noise_ms: float | None = None,
) -> CompileDiagnosis:
    """`measured_steps`: the step indices the run's figures are over (the timed steps).
    `profiled_scale`: timed step / profiled step (medians). The profiler (with Python stacks)
    slows eager Python more than compiled code, so eager time is priced as its share of the
    profiled step, applied to the timed step. `noise_ms`: the smallest per-step cost the
    timed steps resolve (noise_floor_ms); a smaller price is marked below the noise."""
    frames = {f.compile_id: f for f in log.frames or [] if f.compile_id}
    measured = set(measured_steps)

    def compile_cost(cid: str) -> float:
        f = frames.get(cid)
        return (f.compile_s or 0.0) + (f.backward_compile_s or 0.0) if f else 0.0

    issues: list[CompileIssue] = []
    scale = profiled_scale if profiled_scale and profiled_scale > 0 else 1.0
    eager = {k: v * scale for k, v in regions.eager_ms_per_step.items()} if regions else {}
    entries = regions.entries_per_step if regions else {}

    # Graph breaks: one per (file, line, reason); priced by the eager time charged to every
    # compile of the frames they ended.
    sites: dict[tuple[str, int, str], list[run_schema.GraphBreakEvent]] = defaultdict(list)
    for ev in log.graph_breaks or []:
        text = ev.text or ""
        m = _BREAK_AT.search(text)
        file, line = (m.group(1), int(m.group(2))) if m else ("?", 0)
        sites[(file, line, _first_reason(text))].append(ev)
    for (file, line, reason), evs in sites.items():
        cids = tuple(sorted({e.compile_id for e in evs if e.compile_id}))
        text = evs[0].text or ""
        fix = break_fix(text, evs[0].code)
        cost = sum(eager.get(c, 0.0) for c in cids) if regions else None
        per_step = sum(entries.get(c, 0.0) for c in cids) if regions else None
        bound = fix.cause == DISABLED_CAUSE
        issues.append(
            CompileIssue(
                kind="graph_break",
                cause=fix.cause,
                reason=reason,
                file=file,
                line=line or None,
                code=evs[0].code,
                fix=fix.advice,
                rewritten=fix.rewritten,
                compiles=len(evs),
                per_step=per_step,
                cost_ms_per_step=cost,
                cost_basis=(
                    "at most: the helper's eager time between compiled graphs (profiled "
                    "steps); without the break its ops still run, compiled"
                    if bound
                    else "eager time between compiled graphs (profiled steps)"
                ),
                compile_ids=cids,
                cost_is_bound=bound,
            )
        )

    # Recompiles: grouped by the failed guard with its values blanked out.
    groups: dict[tuple[str, str], list[tuple[run_schema.RecompileEvent, str, str | None]]] = (
        defaultdict(list)
    )
    for rev in log.recompiles or []:
        text = _latest_failure(rev.text or "")
        m = _GUARD.search(text)
        guard = m.group(2).strip() if m else text.splitlines()[0] if text else "?"
        code = m.group(3) if m and m.group(3) else None
        key = re.sub(r"(==|!=|<=|>=|<|>)\s*-?[\w.]+", r"\1 …", guard)
        groups[(_frame_of(rev.compile_id), key)].append((rev, guard, code))
    n_measured = len(measured)
    for (_, key), rows in groups.items():
        ev0, guard, code_part = rows[0]
        text = _latest_failure(ev0.text or "")
        loc = _LOC.search(text)
        rfile, rline = (loc.group(1), int(loc.group(2))) if loc else (None, None)
        frame = frames.get(ev0.compile_id or "")
        if rfile is None and frame is not None and frame.co_filename:
            # A global-state guard (grad mode) names no line: the recompiled function's.
            rfile, rline = frame.co_filename, frame.co_firstlineno
        code = _code_of(code_part, text)
        fix = recompile_fix(guard, code)
        cids = tuple(sorted({e.compile_id for e, _, _ in rows if e.compile_id}))
        total_s = sum(compile_cost(c) for c in cids)
        in_steps = [e for e, _, _ in rows if e.step is not None and e.step in measured]
        in_steps_s = sum(compile_cost(e.compile_id) for e in in_steps if e.compile_id)
        mode_switch = fix.cause == "train/eval switch"
        cost = None if mode_switch or not n_measured else in_steps_s * 1000.0 / n_measured
        issues.append(
            CompileIssue(
                kind="recompile",
                cause=fix.cause,
                reason=f"guard failed: {key}",
                file=rfile,
                line=rline,
                code=code,
                fix=fix.advice,
                rewritten=fix.rewritten,
                compiles=len(rows),
                per_step=len(in_steps) / n_measured if n_measured else None,
                cost_ms_per_step=cost,
                cost_basis=(
                    "not a cost inside training: one graph per mode, each compiled once"
                    if mode_switch
                    else "recompile time in the measured steps, per step"
                ),
                compile_s=total_s,
                compile_ids=cids,
            )
        )

    for line_ev in log.log_lines or []:
        msg = line_ev.message or ""
        if line_ev.kind in ("cudagraph_skip", "cudagraph_rerecord"):
            fix = cudagraph_fix(msg)
            kind: Kind = "cudagraph_skip"
        elif line_ev.kind == "recompile_limit":
            fix = recompile_fix("", None)
            at = f" ({log.recompile_limit})" if log.recompile_limit is not None else ""
            fix = type(fix)(
                f"recompile limit{at} hit",
                "the frame now runs eagerly; fix the recompile above rather than raising "
                "torch._dynamo.config.cache_size_limit / recompile_limit",
            )
            kind = "recompile_limit"
        else:
            continue
        issues.append(
            CompileIssue(
                kind=kind,
                cause=fix.cause,
                reason=msg.splitlines()[0][:300] if msg else "?",
                file=None,
                line=None,
                code=None,
                fix=fix.advice,
                rewritten=fix.rewritten,
                compiles=1,
                per_step=None,
                cost_ms_per_step=None,
                cost_basis="counted, not priced",
            )
        )
    issues = [_mark_noise(i, noise_ms) for i in _dedupe_log_lines(issues)]
    issues.sort(key=lambda i: (-ranked_cost(i), -i.compile_s, i.kind, i.where))

    all_s = sum(compile_cost(c) for c in frames)
    measured_s = sum(compile_cost(c) for c, f in frames.items() if f.step in measured)
    counters = log.counters or {}
    notes: list[str] = []
    if regions is None:
        notes.append("no profiled compiled steps: graph breaks are counted, not priced")
    if regions is not None:
        charged = {c for i in issues if i.kind == "graph_break" for c in i.compile_ids}
        overhead = sum(v for k, v in eager.items() if k not in charged)
        if overhead:
            notes.append(
                f"{overhead:.3f} ms/step of eager time inside compiled regions that no break "
                "explains (guard checks, entering and leaving compiled frames, autograd "
                "between graphs): there with or without breaks"
            )
        graphs_ms = regions.compiled_ms_per_step * scale
        if overhead > graphs_ms > 0:
            # The "compile is slower" answer for small models: nothing to fix in the code.
            notes.insert(
                0,
                f"Entering and leaving compiled code costs more per step ({overhead:.3f} ms) "
                f"than the compiled graphs run ({graphs_ms:.3f} ms): the model's work is too "
                "small for torch.compile to pay; larger batches or layers amortise it.",
            )
    if log.dropped:
        notes.append(f"{log.dropped} compile events not kept (over the cap)")
    limit = log.recompile_limit
    if limit is not None and limit > DEFAULT_RECOMPILE_LIMIT:
        notes.append(
            f"dynamo's recompile limit was raised to {limit} in this run (default "
            f"{DEFAULT_RECOMPILE_LIMIT}; by the script or a library it imports): a frame that "
            f"keeps failing its guards recompiles up to {limit} times instead of falling back "
            f"to eager after {DEFAULT_RECOMPILE_LIMIT}."
        )
    failed = [f for f in frames.values() if f.fail_type]
    failure = None
    if failed:
        first = failed[0]
        failure = one_line_message(
            f"{first.fail_type}: {first.fail_reason or 'no reason given'}", FAILURE_TEXT_MAX
        )
        notes.insert(
            0,
            f"{len(failed)} of {len(frames)} compiled frame(s) failed to compile and ran eager "
            f"(torch.compile fell back): {failure}",
        )
    return CompileDiagnosis(
        frames_failed=len(failed),
        failure=failure,
        issues=tuple(issues),
        frames_compiled=len(frames),
        recompiles=sum(1 for c in frames if not c.endswith("/0")),
        graph_breaks=sum(1 for i in issues if i.kind == "graph_break"),
        compile_s_total=all_s,
        compile_s_in_measured_steps=measured_s,
        measured_steps=n_measured,
        compiled_ms_per_step=regions.compiled_ms_per_step * scale if regions else None,
        eager_ms_per_step=(
            sum(i.cost_ms_per_step or 0.0 for i in issues if i.kind == "graph_break")
            if regions is not None
            else None
        ),
        cudagraph_skips=int(counters.get("inductor", {}).get("cudagraph_skips", 0)),
        notes=tuple(notes),
        noise_ms=noise_ms,
        recompile_limit=limit,
        recompile_limit_hit=any(i.kind == "recompile_limit" for i in issues),
    )


def _mark_noise(issue: CompileIssue, noise_ms: float | None) -> CompileIssue:
    cost = issue.cost_ms_per_step
    if noise_ms is None or cost is None or cost <= 0.0 or cost >= noise_ms:
        return issue
    return CompileIssue(**{**asdict(issue), "below_noise": True})


def ranked_cost(issue: CompileIssue) -> float:
    """What an issue ranks by: its price, none when below the noise (ranking such prices
    against each other would rank noise)."""
    return 0.0 if issue.below_noise else issue.cost_ms_per_step or 0.0


def _latest_failure(text: str) -> str:
    """A recompile's text: one failure, or (with several cached graphs) a JSON list, one per
    cached graph, the newest first."""
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:  # cut short: the first string of the list
            first = re.match(r'\[\s*"((?:[^"\\]|\\.)*)"', text)
            return json.loads(f'"{first.group(1)}"') if first else text
        if isinstance(items, list) and items:
            return str(items[0])
    return text


def _code_of(code_part: str | None, text: str) -> str | None:
    """The user's line from a recompile reason: the guard's comment, or the stack's last
    source line."""
    lines = [ln for ln in text.splitlines() if ln.startswith("    ") and ln.strip()]
    if lines:
        return lines[-1].rstrip()
    if code_part:
        return code_part.split("  # ")[0].strip()
    return None


def _dedupe_log_lines(issues: list[CompileIssue]) -> list[CompileIssue]:
    seen: dict[tuple[str, str], int] = {}
    out: list[CompileIssue] = []
    for issue in issues:
        if issue.kind in ("graph_break", "recompile"):
            out.append(issue)
            continue
        key = (issue.kind, issue.reason)
        if key in seen:
            prev = out[seen[key]]
            out[seen[key]] = CompileIssue(**{**asdict(prev), "compiles": prev.compiles + 1})
            continue
        seen[key] = len(out)
        out.append(issue)
    return out
