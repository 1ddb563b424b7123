from __future__ import annotations

from dataclasses import replace

import pytest

from perfdoctor.model import AppliedOptimization, Evidence
from perfdoctor.render import format as fmt
from perfdoctor.render.summary import (
    PAIRED_STEP_HEADER,
    POOLED_P90_HEADER,
    artifact_rows,
    breakdown_rows,
    breakdown_title,
    headline,
    step_rows,
    variant_rows,
)

from .fixtures import cpu_report, empty_series_report


def test_headline_names_the_top_finding_its_fix_and_the_measurement():
    head = headline(cpu_report())
    assert head.slow.startswith("Training waits for the DataLoader")
    assert "Load batches in worker processes" in head.fix
    assert head.measured.startswith("dataloader-workers: 2.43x ± 0.06 faster")
    assert head.status_note is None


def test_headline_prefers_an_accepted_variant_for_the_finding():
    report = cpu_report()
    slower = replace(report.variants[0], label="dl-8", speedup=3.0, verdict="rejected")
    head = headline(replace(report, variants=(slower, *report.variants)))
    assert head.measured.startswith("dataloader-workers:")


def test_headline_leads_with_the_accepted_fix_not_a_rejected_higher_estimate():
    """The top-ranked finding's fix (set-num-threads, by its estimate) was measured and
    rejected; dataloader-workers was accepted: the measured, accepted result leads."""
    report = cpu_report()
    threads_first = (report.findings[1], report.findings[0], *report.findings[2:])
    head = headline(replace(report, findings=threads_first))
    assert head.slow.startswith("Training waits for the DataLoader")
    assert head.measured.startswith("dataloader-workers: 2.43x ± 0.06 faster")
    # Without an accepted variant the top-ranked finding leads, as before.
    rejected = tuple(replace(v, verdict="rejected") for v in report.variants)
    head = headline(replace(report, findings=threads_first, variants=rejected))
    assert head.slow.startswith(threads_first[0].title)


def test_headline_without_variants_says_not_measured():
    head = headline(cpu_report(variants=()))
    assert head.measured.startswith("Not measured")


def test_headline_without_findings():
    head = headline(cpu_report(findings=()))
    assert head.slow == "No bottleneck rule fired on this run."


def test_headline_of_a_run_that_never_reached_a_timed_step():
    report = cpu_report(findings=())
    report = replace(
        report,
        status="script_exited",
        exit_code=2,
        baseline=replace(report.baseline, steps_timed=0),
    )
    head = headline(report)
    assert head.slow.startswith("Not measured: the script stopped before its first timed")
    assert "no bottleneck" not in head.slow.lower()
    assert "exited with code 2" in (head.status_note or "")


def test_crash_note():
    assert "crashed (exit code 1)" in (headline(empty_series_report()).status_note or "")


def test_variant_rows_start_with_the_baseline():
    rows = variant_rows(cpu_report())
    assert [r.label for r in rows] == ["baseline", "dataloader-workers", "set-num-threads"]
    assert rows[0].speedup == "1.00x"
    assert rows[1].applied == "✓ applied"
    assert rows[1].loss_delta == "+0.31%"


def test_applied_marks_for_stacked_variants():
    items = (
        AppliedOptimization("a", True, True, ""),
        AppliedOptimization("b", True, False, ""),
        AppliedOptimization("c", False, False, "refused"),
    )
    assert fmt.applied(items, ("a", "b", "c"), "stacked") == "✓ a, ? b, ✗ c"


def test_breakdown_shares_sum_to_one_in_canonical_order():
    rows = breakdown_rows({"other": 1.0, "data": 2.0, "extra": 1.0, "forward": 4.0})
    assert [r[0] for r in rows] == ["data", "forward", "other", "extra"]
    assert sum(r[2] for r in rows) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.62, "frac", "62.0%"),
        (1536, "bytes", "1.5 KiB"),
        (3, "", "3"),
        (12.3456, "ms", "12.3 ms"),
        (True, "", "yes"),
        (None, "", "—"),
        ("fused", "", "fused"),
    ],
)
def test_scalar_format(value, unit, text):
    assert fmt.scalar(value, unit) == text


def test_evidence_shows_value_and_threshold():
    item = Evidence("data_wait_frac", 0.62, 0.1, ">", "frac")
    assert fmt.evidence(item) == "data_wait_frac = 62.0% (> 10.0%)"


def test_number_format_never_shows_nan():
    assert fmt.number(float("nan")) == "—"
    assert fmt.speedup(None) == "—"
    assert fmt.nbytes(5 * 2**30) == "5.0 GiB"


def test_artifacts_are_listed_once():
    report = cpu_report(
        run_dir="/runs/s1",
        artifacts={
            "report_html": "/runs/s1/report.html",
            "tensorboard_logdir": "/runs/s1",
            "trace": "baseline/t.pt.trace.json.gz",
        },
    )
    rows = artifact_rows(report)
    paths = [path for _, path in rows]
    assert paths.count("/runs/s1/report.html") == 1
    assert paths.count("/runs/s1") == 1
    assert ("trace", "/runs/s1/baseline/t.pt.trace.json.gz") in rows
    assert rows[-1] == ("traces and scalars", "perfdoctor tensorboard /runs/s1")


@pytest.mark.parametrize(
    ("name", "unit"),
    [("data_wait_frac", "frac"), ("data_wait_ms_p50", "ms"), ("peak_allocated_bytes", "bytes")],
)
def test_evidence_unit_comes_from_the_fact_name(name, unit):
    assert fmt.unit_for(name) == unit
    assert fmt.unit_for(name, "x") == "x"
    assert fmt.unit_for("dataloader_num_workers") == ""


def test_the_ab_line_shows_the_two_step_times_the_speedup_is_the_ratio_of():
    """Issue 13: "1.02x ± 0.35, step 1,409 ms -> 1,906 ms": a speedup above 1 beside a step
    time that went up; then "1.99x" beside 1,794 -> 998 ms (1.80x): a median of pair ratios
    beside pooled medians. The line shows the paired medians, whose ratio IS the speedup."""
    report = cpu_report()
    variant = replace(
        report.variants[0],
        speedup=1794.0 / 998.0,
        step_ms_p50=998.0,
        baseline_step_ms_p50=1794.0,
        pooled_step_ms_p50=571.0,
        paired_runs=2,
        pooled="median of 40 steps over 2 runs; baseline median of 40 steps over 2 runs",
    )
    baseline = replace(report.baseline, step_ms_p50=1409.0, pooled_step_ms_p50=1800.0)
    head = headline(replace(report, variants=(variant,), baseline=baseline))
    # One baseline step time in the report (issue 29): the profiled run's 1,409 ms, and the
    # variant's step at its speedup; the speedup's pool is named, its figures are not shown.
    assert head.measured.startswith("dataloader-workers: 1.80x ± 0.06 faster, step 1,409→784 ms")
    assert "paired medians: geometric mean of the run medians over 2 A/B run pairs" in (
        head.measured
    )
    for other in ("1,794", "998", "1,800", "571"):
        assert other not in head.measured


def test_one_table_has_one_kind_of_figure_per_column():
    """The Variants table: the step column is the paired medians, baseline -> variant, whose
    ratio is the row's speedup; the baseline row has no figure of another pool in it, and the
    pooled p90 column says it is pooled."""
    report = cpu_report()
    rows = variant_rows(report)
    # The report's one baseline step (41.5 ms) in the baseline row and in each variant row.
    assert rows[0].step_p50 == fmt.ms(report.baseline.step_ms_p50) == "41.5 ms"
    assert rows[0].step_p90 == fmt.ms(45.6)  # pooled over all baseline runs, as the column says
    assert rows[1].step_p50 == "41.5→17.1 ms" and rows[1].speedup.startswith("2.43x")
    assert POOLED_P90_HEADER.endswith("pooled") and PAIRED_STEP_HEADER == "step p50"


def test_a_variant_reason_states_its_loss_tolerance_as_compare_does():
    from perfdoctor.optimize.numerics import describe_tolerance

    report = cpu_report()
    variant = report.variants[0]
    assert variant.loss_tolerance is not None
    said = describe_tolerance(variant.loss_tolerance)
    assert variant_rows(report)[1].reason == f"faster: 2.43x ± 0.06; loss within {said}"
    assert said.startswith("tolerance 1.0e-01 = max(data-order category 1.0e-01, 2 x ")


def test_the_profiler_tab_note_explains_dataloader_zero_when_the_trace_has_spans():
    report = cpu_report()
    facts = dict(report.facts)
    facts["dataloader_trace_ms_per_step"] = 25.0
    rows = dict(artifact_rows(replace(report, facts=facts)))
    note = rows["PyTorch Profiler tab"]
    assert "DataLoader 0" in note and "user_annotation" in note and "62.0%" in note
    facts["dataloader_trace_ms_per_step"] = None
    assert "PyTorch Profiler tab" not in dict(artifact_rows(replace(report, facts=facts)))


def test_the_step_table_has_one_step_time_p50_and_says_which_run():
    """It had "step time p50" (the profiled run) and "step time p50, all runs" (the pool)
    one under the other: one baseline step time, the profiled run's, with its source."""
    rows = step_rows(cpu_report())
    labels = [label for label, _ in rows]
    assert sum("p50" in label for label in labels) == 1
    assert dict(rows)["step time p50"] == fmt.ms(41.5)  # the profiled run
    assert "41.8" not in " ".join(value for _, value in rows)  # the pool is not repeated
    assert dict(rows)["figures from"].startswith("the profiled baseline run")


def test_cuda_figures_say_which_clock_they_come_from():
    report = cpu_report()
    cuda = replace(report, device=replace(report.device, kind="cuda"))
    assert "GPU's clock" in dict(step_rows(cuda))["figures from"]
    assert breakdown_title(cuda) == "Where a step goes (host clock)"
    assert breakdown_title(report) == "Where a step goes"


STOPPED = {"stopped_by_perfdoctor": True, "step": 26, "location": "train.py:42 in main"}


def test_run_notes_say_where_the_script_was_stopped_and_what_was_removed():
    removed = tuple(f"lightning_logs/version_{k}" for k in range(1, 8))
    head = headline(cpu_report(script_end=STOPPED, removed_outputs=removed))
    stop, tidy = head.run_notes
    assert stop.startswith("The script was stopped by perfdoctor at step 26")
    assert "26 planned" not in stop and "profiler start-up" in stop  # 3 + 10 + 3 gave step 17
    assert "in train.py:42 in main" in stop and "--run-to-end lets it finish" in stop
    assert tidy.startswith("Removed what perfdoctor's own re-runs left in the script's log")
    assert "lightning_logs/version_5 and 2 more" in tidy


def test_run_notes_for_a_script_run_to_its_end_and_for_none():
    to_end = headline(cpu_report(script_end={"stopped_by_perfdoctor": False, "run_to_end": True}))
    assert to_end.run_notes == (
        "The script ran to its end (--run-to-end); only the planned steps were measured.",
    )
    assert headline(cpu_report()).run_notes == ()


def test_every_renderer_shows_the_run_notes():
    import io

    from rich.console import Console

    from perfdoctor.render.html import render_html
    from perfdoctor.render.markdown import render_markdown
    from perfdoctor.render.terminal import render_terminal

    report = cpu_report(script_end=STOPPED)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_terminal(report, console)
    for text in (render_markdown(report), render_html(report), console.file.getvalue()):
        assert "stopped by perfdoctor at step 26" in text


def test_the_variants_note_points_at_a_line_the_report_has():
    """The note under the Variants table sent the reader to "the A/B line beside it", which no
    renderer draws: the pooled pair is in the diagnosis's Measured line."""
    from perfdoctor.render.summary import VARIANTS_NOTE

    assert "A/B line" not in VARIANTS_NOTE
    assert "How each fix was measured" in VARIANTS_NOTE
    assert "baseline_step_ms_p50" in VARIANTS_NOTE  # where the paired medians still are


def test_the_run_ranks_note_says_the_baseline_step_is_the_slowest_ranks():
    """ddp_train.py on 2 ranks: Baseline step p50 4.91 ms beside rank 0's 3.94 ms and rank 1's
    2.89 ms; the note says why (each step at its slowest rank)."""
    from perfdoctor.render.summary import RANK_NOTE_RUN

    assert "slowest rank" in RANK_NOTE_RUN.split("collectives.")[-1]
    assert "comm_frac" in RANK_NOTE_RUN


def test_a_variant_nothing_was_applied_in_shows_no_speedup():
    """mnist with Adadelta: fused-optimizer was refused, and the headline still read
    "0.54x ± 0.18, step 426 ms → 705 ms": the noise of two runs of the same script."""
    report = cpu_report()
    refused = replace(
        report.variants[0],
        speedup=0.54,
        speedup_noise=0.18,
        verdict="rejected",
        reason="not applied: dataloader-workers: the script sets num_workers itself",
        applied=(AppliedOptimization("dataloader-workers", False, False, "refused"),),
    )
    report = replace(report, variants=(refused,))
    head = headline(report)
    assert "0.54x" not in head.measured
    assert "not applied" in head.measured
    assert variant_rows(report)[1].speedup == fmt.MISSING


def test_the_skipped_line_of_a_snapshot_diagnosis_does_not_say_trace():
    """`perfdoctor diagnose snapshot.pickle` said "diagnosed from a trace"."""
    from perfdoctor.analyze.fact_catalog import TRACE_ONLY_REASON
    from perfdoctor.model import SkippedRule
    from perfdoctor.render.summary import skipped_summary

    report = cpu_report(source="trace", skipped_rules=(SkippedRule("r", TRACE_ONLY_REASON),))
    text = skipped_summary(report)
    assert "1 of them because" in text
    assert "from a trace" not in text and "memory snapshots" in text
