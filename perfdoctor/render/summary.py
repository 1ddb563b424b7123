"""What every report says, worded once: the headline, the step table, the variants table.

Renderers differ in markup only; the sentences and the figures they show come from here so
the terminal, Markdown and HTML reports never disagree. Nothing here measures or judges:
it words what the Report already holds. Returned text is raw (unescaped): each renderer
escapes it for its own format.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from perfdoctor.analyze import straggler
from perfdoctor.analyze.fact_catalog import TRACE_ONLY_REASON
from perfdoctor.analyze.run_stats import step_at_speedup
from perfdoctor.model import (
    BaselineSummary,
    Finding,
    GainEstimate,
    RankSummary,
    Recommendation,
    Report,
    VariantResult,
)
from perfdoctor.render import format as fmt
from perfdoctor.render import loop_section, memory_wording, outcome, workload_view
from perfdoctor.render.job_headline import JOB_OWN_WORDS, job_prefix, job_rank_note
from perfdoctor.rundir import BASELINE_LABEL, REPORT_HTML, REPORT_JSON, REPORT_MD

BREAKDOWN_PARTS = ("data", "forward", "backward", "optimizer", "other")

_STATUS_NOTES = {
    "finished_early": "The script ended on its own before the step plan was done; "
    "the figures use the steps it ran.",
    "script_exited": "The script exited with code {code} before the plan was done; "
    "this report is partial.",
    "script_crashed": "The script crashed (exit code {code}); this report is partial.",
    "timeout": "The script ran past --timeout and was stopped; this report is partial.",
    "launch_failed": "The script never started (exit code {code}); see the warnings.",
    "interrupted": "The run was interrupted; this report is partial.",
}

_DETECTION_NOTES = {
    "optimizer": "optimizer.step calls",
    "backward": "backward calls (no torch.optim optimizer seen)",
    "time": "time windows (no optimizer step and no backward seen)",
}


@dataclass(frozen=True)
class Headline:
    slow: str  # what holds training back
    fix: str  # what fixes it
    measured: str  # what perfdoctor measured when it applied the fix
    status_note: str | None = None  # set when the run did not complete its plan
    # How the script ended and what perfdoctor tidied after its re-runs (run_notes()).
    run_notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantRow:
    label: str
    applied: str
    step_p50: str  # "baseline → variant" paired medians: their ratio is `speedup`
    step_p90: str  # pooled over every timed step of the row's runs (descriptive)
    speedup: str
    memory: str
    loss_delta: str
    verdict: str
    reason: str


def headline(report: Report) -> Headline:
    head = _headline(report)
    notes = run_notes(report)
    return replace(head, run_notes=notes) if notes else head


# What a stopped script's end of training held, by whose loop it was stopped in (the stop
# point's framework, collect/bootstrap.py): Lightning's words only where Lightning ran.
_END_OF_TRAINING = {
    "lightning": "its end of training (on_train_end, final checkpoint, logger finalisation)",
    "transformers": "its end of training (the Trainer's on_train_end callbacks, final save)",
}
_PLAIN_END = "what the script does after its loop (saving, a final evaluation, printing)"


def run_notes(report: Report) -> tuple[str, ...]:
    """Where perfdoctor stopped the script (or that it ran to its end), and which output
    folders of perfdoctor's own re-runs it removed."""
    notes: list[str] = []
    unrepresentative = loop_section.headline_note(report)
    if unrepresentative:
        notes.append(unrepresentative)
    end = report.script_end
    if end.get("stopped_by_perfdoctor"):
        step = end.get("step")
        # The step count includes the profiler's start-up step, one more than --warmup +
        # --steps + --profile-steps: say what the plan held, not "its 17 planned steps".
        at = (
            f" at step {step}, the end of its plan (warm-up, timed, profiler start-up and "
            "profiled steps)"
            if isinstance(step, int)
            else ""
        )
        where = f", in {end['location']}" if end.get("location") else ""
        notes.append(
            f"The script was stopped by perfdoctor{at}{where}: "
            f"{_END_OF_TRAINING.get(str(end.get('framework')), _PLAIN_END)} did not run; "
            "--run-to-end lets it finish."
        )
    elif end.get("run_to_end"):
        notes.append(
            "The script ran to its end (--run-to-end); only the planned steps were measured."
        )
    if report.removed_outputs:
        shown = ", ".join(report.removed_outputs[:5])
        more = len(report.removed_outputs) - 5
        notes.append(
            "Removed what perfdoctor's own re-runs left in the script's log folders: "
            f"{shown}{f' and {more} more' if more > 0 else ''} (the first baseline run's "
            "outputs are kept; session.json lists every removal)."
        )
    return tuple(notes)


# Findings about the measurement, not the script (rules/measurement.py): no headline of their
# own on a run without timed steps.
_MEASUREMENT_CAVEATS = frozenset({"busy-machine"})


def step_findings(report: Report) -> list[Finding]:
    """The findings about the script itself (not caveats about how it was measured)."""
    return [f for f in report.findings if f.rule_id not in _MEASUREMENT_CAVEATS]


def _headline(report: Report) -> Headline:
    if is_trace(report):
        return _trace_headline(report)
    note = _STATUS_NOTES.get(report.status)
    status_note = note.format(code=report.exit_code) if note else None
    if not report.baseline.steps_timed and not step_findings(report):
        # Nothing ran long enough to be judged: saying "no bottleneck" would read as a clean
        # bill of health, and a caveat about the machine's load is not what made it slow.
        return Headline(
            slow="Not measured: the run was stopped before its first timed training step."
            if report.status in ("interrupted", "timeout")
            else "Not measured: the script stopped before its first timed training step.",
            fix="Profile it again and let it run through its plan (--warmup and --steps set "
            "how many steps that is)."
            if report.status in ("interrupted", "timeout")
            else "Make the script reach its training loop (its output is in stderr.log and "
            "stdout.log of the run directory), then profile it again.",
            measured=_measured_overall(report),
            status_note=status_note,
        )
    if not report.findings:
        # A partial run is not a clean bill of health: say what the silence is based on.
        slow = (
            "No bottleneck rule fired on this run."
            if status_note is None
            else f"No bottleneck rule fired on the {report.baseline.steps_timed} timed steps "
            "measured before the run stopped."
        )
        return Headline(
            slow=slow,
            fix=outcome.fix_line(report) or "Nothing to fix from what was measured.",
            measured=_measured_best(report) or _measured_overall(report),
            status_note=status_note,
        )
    top = lead_finding(report)
    recs = recommendations_for(report, top)
    # What was measured leads: the best accepted fix, its speedup and interval, the patch.
    return Headline(
        slow=_slow_sentence(top),
        fix=outcome.fix_line(report) or _fix_sentence(top, recs),
        measured=_measured_best(report) or _measured_sentence(report, top, recs),
        status_note=status_note,
    )


TRACE_MEASURED = (
    "Not measured: diagnosed from what was recorded, nothing was applied. `perfdoctor "
    "profile train.py` applies the runtime fixes and measures them."
)


def _trace_headline(report: Report) -> Headline:
    if report.findings:
        top = report.findings[0]
        recs = recommendations_for(report, top)
        slow = _slow_sentence(top)
        if top.rule_id != "rank-straggler":
            slow = job_prefix(report) + slow
        return Headline(slow, _fix_sentence(top, recs), TRACE_MEASURED)
    if not report.baseline.steps_timed and report.facts.get("trace_steps") is not None:
        return Headline(
            slow="No bottleneck rule fired; the trace has no ProfilerStep spans, so the rules "
            "that judge a step could not decide.",
            fix="Record with a profiler schedule and call prof.step() once per iteration "
            "(tensorboard_trace_handler does this with a schedule), then diagnose again.",
            measured=TRACE_MEASURED,
        )
    peak, reserved = (
        report.facts.get("peak_allocated_bytes"),
        report.facts.get("peak_reserved_bytes"),
    )
    if report.baseline.steps_timed == 0 and isinstance(peak, int):
        if memory_wording.has_history(report.facts):
            memory = f"Peak allocated {fmt.nbytes(peak)}"
        else:
            memory = (
                f"At the snapshot (no allocator history, so no peak): {fmt.nbytes(peak)} allocated"
            )
        if isinstance(reserved, int):
            memory += f", reserved {fmt.nbytes(reserved)}"
        return Headline(
            slow=f"{memory}; no memory rule fired. The GPU's memory size is unknown from a "
            "snapshot alone: pass the trace of the same run beside it to judge the headroom.",
            fix="Nothing to fix from what the snapshot shows.",
            measured=TRACE_MEASURED,
        )
    return Headline(
        slow="No bottleneck rule fired on what the input shows.",
        fix="Nothing to fix from what was recorded; the skipped rules say what a perfdoctor "
        "run would add.",
        measured=TRACE_MEASURED,
    )


def is_trace(report: Report) -> bool:
    """A report of `perfdoctor diagnose`: built from traces recorded elsewhere."""
    return report.source == "trace"


def source_text(report: Report) -> str:
    """Where the figures come from: '' for a perfdoctor run."""
    if not is_trace(report):
        return ""
    traces = [p for p in report.inputs if not p.endswith((".pickle", ".pkl"))]
    snaps = len(report.inputs) - len(traces)
    parts = []
    if traces:
        parts.append(f"{len(traces)} trace" + ("s" if len(traces) > 1 else ""))
    if snaps:
        parts.append(f"{snaps} memory snapshot" + ("s" if snaps > 1 else ""))
    return "diagnosed from " + " and ".join(parts or ["no input"]) + ", without a perfdoctor run"


def has_steps(report: Report) -> bool:
    """False for a memory snapshot diagnosed alone: it has no step to break down."""
    return not (is_trace(report) and report.facts.get("trace_steps") is None)


def breakdown_missing(report: Report) -> str:
    """Why "where a step goes" is empty, in lower case."""
    if is_trace(report):
        return "not measured: the trace has no DataLoader spans (and no forward/backward phases)"
    return "not measured: no per-phase timing was recorded"


def step_title(report: Report) -> str:
    if not is_trace(report):
        return "Baseline step"
    return "Profiled steps" if report.facts.get("trace_steps") is not None else "Memory"


def skipped_summary(report: Report) -> str:
    count = len(report.skipped_rules)
    if not is_trace(report):
        return f"{count} rule(s) skipped: their facts were not measured on this run"
    run_only = sum(1 for s in report.skipped_rules if TRACE_ONLY_REASON in s.reason)
    return (
        f"{count} rule(s) skipped; {run_only} of them because this was diagnosed from what was "
        "recorded (traces, memory snapshots) without a perfdoctor run (they need what only "
        "`perfdoctor profile` records: the script's settings, the loss, device samples)"
    )


RANK_COLUMNS = ("rank", "worker", "steps", "step p50", "own p50", "data p50", "GPU busy", "comm")


def has_process_group(report: Report) -> bool:
    """Whether the report's processes are ranks of a process group. Hogwild trainers and other
    processes that train without one are not ranks: nobody waits for anybody."""
    return any(r.rank is not None for r in report.ranks)


def ranks_title(report: Report) -> str:
    """The ranks section's heading: "Ranks", or "Training processes" without a process group."""
    return "Ranks" if has_process_group(report) or not report.ranks else "Training processes"


def _peers(report: Report) -> str:
    return "ranks" if has_process_group(report) or not report.ranks else "processes"


def rank_rows(report: Report) -> list[list[str]]:
    """One row per rank (per training process of a run) of a multi-rank report
    (RANK_COLUMNS), the straggler (analyze/straggler.py, the rank-straggler rule's) marked."""
    slow = _straggler(report.ranks)
    mark = " (straggler)" if _straggler_found(report) else " (most own work)"
    rows = []
    for r in report.ranks:
        label = fmt.MISSING if r.rank is None else str(r.rank)
        if slow is not None and r is slow:
            label += mark
        worker = r.worker + (f" ({r.windows} windows)" if r.windows > 1 else "")
        rows.append(
            [
                label,
                worker,
                fmt.number(r.steps),
                fmt.ms(r.step_ms_p50),
                fmt.ms(r.own_ms_p50),
                fmt.ms(r.data_wait_ms_p50),
                fmt.percent(r.gpu_busy_frac),
                fmt.percent(r.comm_frac),
            ]
        )
    return rows


RANK_NOTE = (
    "Medians over the profiled steps of each rank's trace. data: time in the DataLoader per "
    "step; comm: communication share of the step; own: the step less the "
    "time in communication (GPU collective kernels where the trace has them, else the host's "
    "collective calls): ranks in lockstep share the step time, and the straggler, the rank "
    "the others wait for in their collectives, is the one with the most own work (the "
    "rank-straggler finding judges by the same figure)."
)


RANK_NOTE_RUN = (
    "Medians over the timed steps of each training process (no profiler). data: time in the "
    "DataLoader per step; comm: share of the step with a torch.distributed collective in "
    "flight (the script's collectives and DDP's gradient all-reduce; on CUDA the host's part "
    "only); own: the step less that time: ranks in lockstep share the step time, and the "
    "straggler, the rank the others wait for in their collectives, is the one with the most "
    "own work (the rank-straggler finding judges by the same figure). The Baseline step "
    "figures are the job's: each step counted at its slowest rank; the findings' comm_frac "
    "comes from the profiled steps' trace."
)

# Runs recorded before steps.jsonl had comm_ms: analyze/straggler.py's fallback.
RANK_NOTE_NO_COMM = (
    " No process recorded its collective time: own is the step's wall time outside forward "
    "and backward, where DDP's collectives run."
)


def rank_note(report: Report) -> str:
    """What the ranks table's figures are: from traces, or from a run's timed steps."""
    if is_trace(report):
        return RANK_NOTE + job_rank_note(report)
    fallback = report.facts.get("straggler_own_basis") == "outside_forward_backward"
    return RANK_NOTE_RUN + (RANK_NOTE_NO_COMM if fallback else "")


def _straggler(ranks: tuple[RankSummary, ...]) -> RankSummary | None:
    """The rank the others wait for, by analyze/straggler.py: the one the facts (and so the
    rank-straggler rule) name, from the same per-rank own work."""
    # In rank order, as the facts break ties: the lowest rank among equals.
    ordered = sorted(
        enumerate(ranks), key=lambda ir: ir[1].rank if ir[1].rank is not None else ir[0]
    )
    picked = straggler.straggler_and_fastest((r, r.own_ms_p50) for _, r in ordered)
    return picked[0] if picked is not None else None


def _straggler_found(report: Report) -> bool:
    """Whether the rank-straggler finding fired: below its threshold the rank with the most
    own work is marked, not called a straggler."""
    return any(f.rule_id == "rank-straggler" for f in report.findings)


def _own_work_words(report: Report) -> str:
    if report.facts.get("straggler_own_basis") == "outside_forward_backward":
        return "its wall time outside forward and backward"
    if report.facts.get("job_collectives_matched") is not None:
        return JOB_OWN_WORDS
    return "its step less its time in collectives"


def _name(r: RankSummary) -> str:
    return f"rank {r.rank}" if r.rank is not None else r.worker


def rank_spread_text(report: Report) -> str:
    """The step-time spread across ranks and the straggler, with what differs on it."""
    steps = [r.step_ms_p50 for r in report.ranks if r.step_ms_p50 is not None]
    if len(steps) < 2:
        if not is_trace(report):
            return "Fewer than two processes have timed steps: no spread across ranks."
        return "Fewer than two ranks have ProfilerStep spans: no spread across ranks."
    lo, hi = min(steps), max(steps)
    peers = _peers(report)
    text = (
        f"Step time p50 across {len(steps)} {peers}: {fmt.ms(lo)} to {fmt.ms(hi)} "
        f"(spread {fmt.percent((hi - lo) / lo if lo > 0 else None)})."
    )
    slow = _straggler(report.ranks)
    if slow is None:
        return text
    others = [r for r in report.ranks if r is not slow and r.own_ms_p50 is not None]
    typical = sorted(r.own_ms_p50 for r in others if r.own_ms_p50 is not None)
    median = typical[len(typical) // 2] if typical else None
    if median is None or slow.own_ms_p50 is None:
        return text
    excess = slow.own_ms_p50 - median
    who = (
        "Straggler (the rank the others wait for: the most own work per step, "
        f"{_own_work_words(report)})"
        if _straggler_found(report)
        else f"Most own work per step ({_own_work_words(report)}; too little more than the "
        "others' for the rank-straggler finding)"
    )
    text += (
        f" {who}: {_name(slow)}, own work {fmt.ms(slow.own_ms_p50)} "
        f"against {fmt.ms(median)} on the median other {peers[:-1]} ({fmt.ms(excess)} more per step"
    )
    if slow.step_ms_p50:
        text += f", {fmt.percent(excess / slow.step_ms_p50)} of its step"
    text += ")."
    diffs = []
    for label, attr, as_ms in (
        ("data wait", "data_wait_ms_p50", True),
        ("GPU busy", "gpu_busy_frac", False),
        ("communication share", "comm_frac", False),
    ):
        mine = getattr(slow, attr)
        theirs = sorted(v for v in (getattr(r, attr) for r in others) if v is not None)
        if mine is None or not theirs:
            continue
        mid = theirs[len(theirs) // 2]
        shown = fmt.ms if as_ms else fmt.percent
        diffs.append(f"{label} {shown(mine)} against {shown(mid)}")
    if diffs:
        text += " On it: " + "; ".join(diffs) + " (median of the others)."
    return text


def lead_finding(report: Report) -> Finding:
    """The finding the headline leads with: after apply, the one whose fix was accepted with
    the largest measured speedup (a measured result outranks an estimate, and a fix that was
    tried and rejected must not headline over one that worked); else the top-ranked one."""
    accepted = sorted(
        (
            v
            for v in report.variants
            if v.verdict == "accepted" and len(v.optimizations) == 1 and v.peel_of is None
        ),
        key=lambda v: v.speedup if v.speedup is not None else float("-inf"),
        reverse=True,
    )
    for variant in accepted:
        for finding in report.findings:
            fixes = {r.optimization_id for r in recommendations_for(report, finding)}
            if set(variant.optimizations) & (fixes | set(finding.optimizations)):
                return finding
    return report.findings[0]


def recommendations_for(report: Report, finding: Finding) -> list[Recommendation]:
    by_rule = [r for r in report.recommendations if finding.rule_id in r.addresses]
    if by_rule:
        return by_rule
    wanted = set(finding.optimizations)
    return [r for r in report.recommendations if r.optimization_id in wanted]


def recommendation_facts(rec: Recommendation) -> list[tuple[str, str]]:
    """The label/value line under a recommendation's title, in every renderer's markup:
    kind, risk, and (when known) the expected gain and the findings it addresses."""
    facts = [("Kind", rec.kind), ("Risk", rec.risk)]
    gain = gain_text(rec.expected_gain)
    if gain:
        facts.append(("Expected", gain))
    if rec.addresses:
        facts.append(("Addresses", ", ".join(rec.addresses)))
    return facts


def gain_text(gain: GainEstimate, with_method: bool = True) -> str:
    parts = []
    if gain.step_time_frac is not None:
        ceiling = "up to " if gain.upper_bound else ""
        parts.append(f"{ceiling}~{fmt.percent(gain.step_time_frac, 0)} of step time")
    if gain.memory_bytes is not None:
        parts.append(f"~{fmt.nbytes(gain.memory_bytes)} of peak memory")
    if not parts:
        return ""
    text = "saves " + " and ".join(parts)
    return f"{text} ({gain.method})" if gain.method and with_method else text


def _slow_sentence(top: Finding) -> str:
    if top.evidence:
        return f"{top.title}: {fmt.evidence(top.evidence[0])}."
    return f"{top.title}."


def _fix_sentence(top: Finding, recs: list[Recommendation]) -> str:
    if recs:
        titles = "; ".join(rec.title for rec in recs[:2])
        gain = next((g for g in (gain_text(r.expected_gain, False) for r in recs) if g), "")
        return f"{titles} — {gain}." if gain else f"{titles}."
    if top.optimizations:
        return "Apply " + ", ".join(top.optimizations) + "."
    return "No automatic fix: see the explanation of this finding."


def _measured_best(report: Report) -> str | None:
    """The Measured line after apply: the best accepted fix (render/outcome.py), whatever
    finding it addresses, and how many others were accepted beside it."""
    best = outcome.best_accepted(report)
    if best is None:
        return None
    accepted = [v for v in report.variants if v.verdict == "accepted" and v.peel_of is None]
    others = len(accepted) - 1
    text = _variant_sentence(best, report.baseline.step_ms_p50)
    return text + (f" {others} other variant(s) accepted too." if others else "")


def _nothing_applied(variant: VariantResult) -> bool:
    """Every applier of the variant refused: its runs timed the unchanged script, so its
    'speedup' is run-to-run noise, not an effect."""
    return bool(variant.applied) and not any(item.applied for item in variant.applied)


def _variant_sentence(variant: VariantResult, baseline_ms: float | None = None) -> str:
    if variant.verdict == "failed":
        return f"{variant.label}: failed ({variant.reason})."
    if _nothing_applied(variant):
        return f"{variant.label}: {variant.verdict} ({variant.reason})."
    # The interval where there is one (it is what the verdict was decided on), else the band.
    noise = None if variant.interval is not None else variant.speedup_noise
    text = f"{variant.label}: {fmt.speedup(variant.speedup, noise)}"
    if variant.interval is not None:
        text += f" [{variant.interval[0]:.2f}, {variant.interval[1]:.2f}]"
    if variant.verdict == "accepted":
        # Only an accepted speedup is a measured direction; a rejected one may be noise.
        text += " faster" if (variant.speedup or 0) >= 1 else " slower"
    if variant.load:  # the figure holds at the load it was measured at
        text += f" while {fmt.one_line(variant.load).split(';')[0]}"
    # One baseline step time in the whole report (analyze/run_stats.step_at_speedup): the
    # variant's step is that figure over the speedup; the speedup's own pool is named.
    step = report_step_text(variant, baseline_ms)
    if step != fmt.MISSING:
        text += f", step {step} (the baseline's step over the speedup; {paired_text(variant)})"
    return f"{text}, {variant.verdict} ({variant_reason(variant)})."


def report_step_text(variant: VariantResult, baseline_ms: float | None) -> str:
    """ "654→451 ms": the report's baseline step time, then the variant's at its speedup.
    Without the report's baseline (perfdoctor compare), the paired medians."""
    if baseline_ms is None:
        return paired_step_text(variant)
    mine = step_at_speedup(baseline_ms, variant.speedup)
    if mine is None:
        return fmt.MISSING
    return f"{fmt.number(baseline_ms)}→{fmt.ms(mine)}"


def paired_step_text(variant: VariantResult) -> str:
    """ "1,794 → 998 ms": the paired medians, baseline then variant, whose ratio is the
    variant's speedup (optimize/estimate.py)."""
    base, mine = variant.baseline_step_ms_p50, variant.step_ms_p50
    if base is None or mine is None:
        return fmt.MISSING
    return f"{fmt.number(base)}→{fmt.ms(mine)}"


def paired_text(variant: VariantResult) -> str:
    """What the paired medians are, for the reader: how many runs each side."""
    windows = variant.statistic == "throughput-windows"
    if variant.method == "in-process":
        pairs = variant.pairs or 0
        processes = variant.processes or 1
        where = "one process" if processes <= 1 else f"pooled over {processes} processes"
        if windows:
            return (
                "throughput windows: geometric mean of the blocks' wall time per step over "
                f"{pairs} paired blocks, {where}"
            )
        return (
            f"paired medians: geometric mean of the block medians over {pairs} paired "
            f"blocks, {where}"
        )
    runs = variant.paired_runs
    each = f"{runs} A/B run pair" + ("" if runs == 1 else "s") if runs else "the A/B run pairs"
    if windows:
        return f"throughput windows: geometric mean of the runs' wall time per step over {each}"
    return f"paired medians: geometric mean of the run medians over {each}"


def variant_reason(variant: VariantResult) -> str:
    """The verdict's reason, with the loss tolerance it was judged by, worded as `perfdoctor
    compare` words it (optimize/numerics.py describe_tolerance)."""
    from perfdoctor.optimize.numerics import describe_tolerance

    tolerance = variant.loss_tolerance
    if tolerance is None or "tolerance " in variant.reason:
        return variant.reason
    return f"{variant.reason}; loss within {describe_tolerance(tolerance)}"


def _measured_sentence(report: Report, top: Finding, recs: list[Recommendation]) -> str:
    if not report.variants:
        return _measured_overall(report)
    fix_ids = {r.optimization_id for r in recs} | set(top.optimizations)
    relevant = [v for v in report.variants if fix_ids & set(v.optimizations) and v.peel_of is None]
    if not relevant:
        return "No variant applied a fix for this finding; see the variants table."
    accepted = [v for v in relevant if v.verdict == "accepted"]
    pool = accepted or relevant
    best = max(pool, key=lambda v: v.speedup if v.speedup is not None else float("-inf"))
    return _variant_sentence(best, report.baseline.step_ms_p50)


def _measured_overall(report: Report) -> str:
    if not report.variants:
        return "Not measured: no optimization was applied and re-measured in this run."
    accepted = [v for v in report.variants if v.verdict == "accepted" and v.peel_of is None]
    if not accepted:
        return f"{len(report.variants)} variant(s) measured, none accepted."
    best = max(accepted, key=lambda v: v.speedup if v.speedup is not None else float("-inf"))
    return _variant_sentence(best, report.baseline.step_ms_p50)


def step_rows(report: Report) -> list[tuple[str, str]]:
    """The baseline's step figures as (label, value) pairs."""
    base = report.baseline
    if is_trace(report):
        return _trace_step_rows(report)
    micro = base.micro_batches_per_step
    # One baseline step time in the report: the profiled run's, the run every figure of this
    # table, the breakdown and the findings come from. The variants are judged on their
    # paired runs instead, and say so.
    rows = [
        ("figures from", baseline_pool_text(report)),
        ("step time p50", fmt.ms(base.step_ms_p50)),
        ("step time p90", fmt.ms(base.step_ms_p90)),
        ("throughput", fmt.throughput(base.throughput_samples_s)),
        ("waiting for data", fmt.percent(base.data_wait_frac)),
        ("peak memory", fmt.nbytes(base.peak_memory_bytes)),
        ("steps timed", fmt.number(base.steps_timed)),
        ("optimizer steps", optimizer_steps_text(base)),
        ("micro-batches per step", fmt.number(micro)),
        ("steps counted by", step_counting(base)),
    ]
    return rows


def optimizer_steps_text(base: BaselineSummary) -> str:
    """Finished optimizer.step() calls. With a closure (LBFGS) one call runs its closure many
    times and the plan can end inside the first call: "0" alone reads as no optimizer."""
    if base.closure_steps and base.optimizer_steps is not None:
        return (
            f"{fmt.number(base.optimizer_steps)} finished step(closure) call(s), "
            f"{fmt.number(base.closure_steps)} closure calls"
        )
    return fmt.number(base.optimizer_steps)


def step_counting(base: BaselineSummary) -> str:
    """What a step is; closure calls of optimizer.step(closure) are steps of their own, so
    the optimizer steps beside them (finished step() calls) can be fewer."""
    if base.closure_steps:
        return (
            f"closure calls inside optimizer.step(closure) ({fmt.number(base.closure_steps)} "
            "calls, each a forward and backward)"
        )
    return _DETECTION_NOTES.get(base.step_detection or "", fmt.MISSING)


def breakdown_title(report: Report) -> str:
    """The breakdown's phases are timed on the host: on CUDA its total is the host's step,
    not the GPU-clock step time beside it, and the title says so."""
    cuda = report.device is not None and report.device.kind == "cuda"
    return "Where a step goes" + (" (host clock)" if cuda and not is_trace(report) else "")


def baseline_pool_text(report: Report) -> str:
    """Which run and which clock the Baseline figures come from."""
    text = "the profiled baseline run"
    if report.baseline.pooled:
        text += " (the first of the baseline runs)"
    if report.device is not None and report.device.kind == "cuda":
        text += "; step times on the GPU's clock"
    return text


def _trace_step_rows(report: Report) -> list[tuple[str, str]]:
    base, facts = report.baseline, report.facts
    peak = memory_wording.has_history(facts)
    memory: list[tuple[str, str]] = [
        ("peak memory" if peak else "memory at the snapshot", fmt.nbytes(base.peak_memory_bytes))
    ]
    reserved, frag = facts.get("peak_reserved_bytes"), facts.get("fragmentation_frac")
    if isinstance(reserved, int):
        memory.append(
            ("peak reserved" if peak else "reserved at the snapshot", fmt.nbytes(reserved))
        )
    frag_row = memory_wording.step_table_row(facts)
    if isinstance(frag, float) and frag_row is not None:
        memory.append(frag_row)
    if facts.get("trace_steps") is None and base.peak_memory_bytes is not None:
        return memory  # a memory snapshot alone: no step to show
    loader = {True: "worker processes", False: "in-process (num_workers=0)"}
    multiprocess = facts.get("dataloader_multiprocess")
    rows = [
        ("step time p50", fmt.ms(base.step_ms_p50)),
        ("step time p90", fmt.ms(base.step_ms_p90)),
        ("waiting for data", fmt.percent(base.data_wait_frac)),
        (
            "DataLoader",
            loader.get(multiprocess, fmt.MISSING)
            if isinstance(multiprocess, bool)
            else fmt.MISSING,
        ),
    ]
    busy = facts.get("gpu_busy_frac")
    if isinstance(busy, (int, float)):
        rows.append(("GPU busy", fmt.percent(float(busy))))
    rows += memory
    rows += [
        ("profiled steps", fmt.number(base.steps_timed)),
        ("steps counted by", "ProfilerStep spans" if base.steps_timed else fmt.MISSING),
    ]
    return workload_view.frame_step_rows(report, rows)


def breakdown_rows(breakdown_ms: Mapping[str, float]) -> list[tuple[str, float, float]]:
    """(part, ms, share of the total) in the canonical order, unknown parts last."""
    parts = [p for p in BREAKDOWN_PARTS if p in breakdown_ms]
    parts += sorted(p for p in breakdown_ms if p not in BREAKDOWN_PARTS)
    values = [(p, float(breakdown_ms[p])) for p in parts if breakdown_ms[p] is not None]
    total = sum(v for _, v in values)
    return [(p, v, v / total if total > 0 else 0.0) for p, v in values]


def variant_rows(report: Report) -> list[VariantRow]:
    """The baseline first (the reference every speedup is relative to), then each variant."""
    base = report.baseline
    # The p90 column pools every run of a row, the baseline's too (all baseline runs). The
    # paired column has no baseline figure of its own: each variant row shows the baseline
    # runs it was paired with.
    p90 = base.pooled_step_ms_p90 if base.pooled_step_ms_p90 is not None else base.step_ms_p90
    rows = [
        VariantRow(
            label=BASELINE_LABEL,
            applied=fmt.MISSING,
            step_p50=fmt.ms(base.step_ms_p50),
            step_p90=fmt.ms(p90),
            speedup=fmt.speedup(1.0) if base.step_ms_p50 is not None else fmt.MISSING,
            memory=fmt.nbytes(base.peak_memory_bytes),
            loss_delta=fmt.MISSING,
            verdict="reference",
            reason="the unmodified script: its step time is the report's one baseline figure, "
            "which each variant's step is stated against",
        )
    ]
    for v in report.variants:
        rows.append(
            VariantRow(
                label=v.label,
                applied=fmt.applied(v.applied, v.optimizations, v.label),
                step_p50=report_step_text(v, base.step_ms_p50),
                step_p90=fmt.ms(v.step_ms_p90),
                speedup=fmt.MISSING
                if _nothing_applied(v)
                else fmt.speedup(v.speedup, v.speedup_noise),
                memory=fmt.nbytes(v.peak_memory_bytes),
                loss_delta=fmt.signed_percent(v.loss_delta),
                # "?": measured while other processes kept the machine busy (see reason).
                verdict=f"{v.verdict}?" if v.low_confidence else v.verdict,
                reason=variant_reason(v),
            )
        )
    return rows


# Column headers of the variants table, the same in every renderer.
PAIRED_STEP_HEADER = "step p50"
POOLED_P90_HEADER = "p90, pooled"
VARIANTS_NOTE = (
    "Step p50: the report's one baseline step time (the profiled baseline run's median) → "
    "that step divided by the variant's speedup. The speedup is the ratio of the paired "
    "medians (the geometric means of the median steps of the A/B runs paired with each "
    "other, or, for a fix measured in one process, of the paired block medians of the "
    "switched run), ± its noise band; How each fix was measured lists them for the fixes "
    "measured in one process, and report.json holds them for every variant "
    "(baseline_step_ms_p50, step_ms_p50). p90, pooled: the "
    "90th percentile of every timed step of every run of a row (the baseline row: all "
    "baseline runs), a descriptive figure."
)


def applied_changes(report: Report) -> list[tuple[str, str]]:
    """(optimization id, what its applier changed and why) for each applied optimization,
    once, from the first variant that applied it (single variants come before the stack)."""
    changes: dict[str, str] = {}
    for variant in report.variants:
        for item in variant.applied:
            if item.applied and item.detail and item.id not in changes:
                changes[item.id] = item.detail
    return list(changes.items())


def run_title(report: Report) -> str:
    return " ".join([report.script, *report.argv])


def device_text(report: Report) -> str:
    dev = report.device
    if dev is None:
        return fmt.MISSING
    text = dev.name if dev.count <= 1 else f"{dev.count}x {dev.name}"
    extras = []
    if dev.total_memory_bytes:
        extras.append(fmt.nbytes(dev.total_memory_bytes))
    if dev.compute_capability:
        extras.append(f"sm {dev.compute_capability}")
    if dev.kind == "cpu" and dev.cpu_cores_logical:
        extras.append(f"{dev.cpu_cores_logical} logical cores")
    ranks = world_text(report)
    # ROCm builds of torch call an AMD GPU "cuda"; a trace's deviceProperties tell them apart.
    kind = "rocm" if report.facts.get("gpu_vendor") == "amd" else dev.kind
    return (
        f"{kind}: {text}"
        + (f" ({', '.join(extras)})" if extras else "")
        + (f"; {ranks}" if ranks else "")
    )


def world_text(report: Report) -> str:
    """'world size 2 (2 ranks, gloo)' for a multi-rank run; '' for a single process."""
    facts = report.facts
    ranks, world, backend = (
        facts.get("ranks_launched"),
        facts.get("world_size"),
        facts.get("dist_backend"),
    )
    ranks = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else 1
    world = world if isinstance(world, int) and not isinstance(world, bool) else 1
    if ranks <= 1 and world <= 1:
        return ""
    if world <= 1:
        return f"{ranks} training processes, no process group"
    counted = f"{ranks} ranks" if ranks > 1 else ""
    if is_trace(report):  # the traces given may be a few ranks of a larger job
        counted = f"{ranks} of {world} ranks traced" if ranks < world else f"{ranks} ranks traced"
    details = ", ".join(part for part in (counted, str(backend or "")) if part)
    return f"world size {world}" + (f" ({details})" if details else "")


def view_command(report: Report) -> str:
    """`perfdoctor view`: the trace in the viewer torch-tb-profiler ships, with no network
    (TensorBoard's Profiler tab needs it). For a diagnosed trace, the user's own file."""
    traces = sorted(path for name, path in report.artifacts.items() if "trace" in name.lower())
    if not traces:
        return ""
    if is_trace(report):
        return f"perfdoctor view {traces[0]}"
    return f"perfdoctor view {report.run_dir}" if report.run_dir else ""


def tensorboard_command(report: Report) -> str:
    # A diagnose report directory holds no traces: the user's own logdir is the one to open.
    if is_trace(report) or not report.run_dir:
        return ""
    return f"perfdoctor tensorboard {report.run_dir}"


_BRIEF_ARTIFACT_WORDS = ("trace", "snapshot", "memory")


def artifact_rows(report: Report, brief: bool = False) -> list[tuple[str, str]]:
    """Where to look next: the reports, then the run's own artifacts, then TensorBoard.

    Artifact paths may be relative to the run directory (RunManifest.artifacts) or absolute;
    a path already listed (the reports, the logdir itself) is listed once. `brief` keeps
    only the artifacts a person opens (traces, memory snapshots), not the raw logs.
    """
    rows: list[tuple[str, str]] = []
    root = report.run_dir.rstrip("/")
    if root:
        size = f" ({fmt.nbytes(report.run_dir_bytes)})" if report.run_dir_bytes else ""
        rows.append(("report directory" if is_trace(report) else "run directory", root + size))
        rows.extend((name, f"{root}/{name}") for name in (REPORT_HTML, REPORT_MD, REPORT_JSON))
    shown = {os.path.normpath(path) for _, path in rows}
    for name, path in sorted(report.artifacts.items()):
        # A diagnosed trace's paths are the user's own input, as given: never under the root.
        relative = (
            root and not is_trace(report) and not os.path.isabs(path) and not path.startswith(root)
        )
        full = f"{root}/{path}" if relative else path
        if os.path.normpath(full) in shown:
            continue
        if brief and not any(word in name.lower() for word in _BRIEF_ARTIFACT_WORDS):
            continue
        shown.add(os.path.normpath(full))
        rows.append((name, full))
    viewer = view_command(report)
    if viewer:
        rows.append(("trace, offline viewer", viewer))
    command = tensorboard_command(report)
    if command:
        rows.append(("traces and scalars", command))
        note = profiler_tab_note(report)
        if note:
            rows.append(("PyTorch Profiler tab", note))
    return rows


def profiler_tab_note(report: Report) -> str | None:
    """Why TensorBoard's PyTorch Profiler tab shows DataLoader = 0 when this report measured
    data wait: torch-tb-profiler (0.4.x, unmaintained) counts DataLoader time only from
    `cpu_op` events named enumerate(DataLoader)#...__next__, and torch 2 records those spans
    as `user_annotation`, which the plugin drops. A user cross-checking the two must not see
    a contradiction without the reason."""
    traced = report.facts.get("dataloader_trace_ms_per_step")
    if not isinstance(traced, (int, float)) or isinstance(traced, bool) or traced <= 0:
        return None
    wait = report.baseline.data_wait_frac
    measured = f" ({fmt.percent(wait)} of the step here)" if wait is not None else ""
    return (
        "its Overview reads DataLoader 0: torch-tb-profiler counts only cpu_op events named "
        "enumerate(DataLoader)#..., and this torch records them as user_annotation, which "
        f"the plugin drops. The spans are in the trace ({fmt.ms(float(traced))} per step; "
        f"Trace view shows them), and the data wait perfdoctor reports{measured} comes from "
        "its own DataLoader timing."
    )
