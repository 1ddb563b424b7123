from __future__ import annotations

import itertools
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from perfdoctor.render.charts import (
    _LABEL_GAP_FRAC,
    MAX_POINTS,
    _spread_labels,
    build_charts,
    downsample,
)
from perfdoctor.render.format import nbytes

from .fixtures import cpu_report


def test_downsample_keeps_extremes_and_bounds_length():
    xs = [float(i) for i in range(10_000)]
    ys = [1.0] * 10_000
    ys[1234] = 50.0  # a spike
    ys[8000] = -3.0  # a dip
    dx, dy = downsample(xs, ys)
    assert len(dx) <= MAX_POINTS
    assert 50.0 in dy and -3.0 in dy
    assert dx == sorted(dx)


def test_downsample_leaves_short_series_alone():
    xs, ys = [0.0, 1.0, 2.0], [3.0, 1.0, 2.0]
    assert downsample(xs, ys) == (xs, ys)


def test_charts_are_svg_without_prolog_or_metadata():
    charts = build_charts(cpu_report())
    assert [c.key for c in charts] == ["step_time", "breakdown", "utilization", "memory", "loss"]
    for chart in charts:
        assert chart.svg is not None and chart.svg.startswith("<svg")
        assert "<metadata>" not in chart.svg
        assert "<!DOCTYPE" not in chart.svg


def test_charts_are_reproducible():
    first = [c.svg for c in build_charts(cpu_report())]
    second = [c.svg for c in build_charts(cpu_report())]
    assert first == second


def test_memory_peak_is_marked_from_the_full_series():
    report = cpu_report()
    rss = report.series["samples"]["baseline"]["rss_bytes"]
    memory = build_charts(report)[3]
    assert f"peak {nbytes(max(rss))}" in (memory.svg or "")


def test_cuda_memory_history_is_preferred_over_rss():
    report = cpu_report()
    series = dict(report.series)
    series["memory"] = {
        "baseline": {"t_s": [0.0, 1.0, 2.0], "allocated_bytes": [2**30, 3 * 2**30, 2**30]}
    }
    memory = build_charts(replace(report, series=series))[3]
    assert "allocated device memory" in memory.title
    assert "peak 3.0 GiB" in (memory.svg or "")


def test_gpu_samples_switch_the_utilization_chart():
    report = cpu_report()
    series = dict(report.series)
    series["samples"] = {
        "baseline": {
            "t": [0.0, 0.1, 0.2],
            "gpu_util": [0.90, 0.95, 0.97],
            "power_w": [300, 310, 305],
        }
    }
    util = build_charts(replace(report, series=series))[2]
    assert util.title == "GPU utilization and power over time"
    assert "power (W, dashed)" in (util.svg or "")


def test_memory_chart_labels_the_peak_the_summary_states():
    """Issue 13: the chart said 421.0 MiB while the summary said 398.1 MiB."""
    report = cpu_report()
    rss = report.series["samples"]["baseline"]["rss_bytes"]
    stated = max(rss) + 23 * 2**20  # reached between the chart's samples
    report = replace(report, baseline=replace(report.baseline, peak_memory_bytes=stated))
    svg = build_charts(report)[3].svg or ""
    assert f"peak {nbytes(stated)}" in svg
    assert f"peak {nbytes(max(rss))}" not in svg


def test_close_peak_labels_are_moved_apart():
    ys = _spread_labels([400.0, 402.0, 100.0, 401.0], top=500.0)
    assert ys[2] == 100.0
    near = sorted(ys[i] for i in (0, 1, 3))
    assert near[0] == 400.0
    assert all(b - a >= 500.0 * _LABEL_GAP_FRAC - 1e-9 for a, b in itertools.pairwise(near))


def test_cpu_chart_draws_the_runs_own_cpu_not_a_flat_machine_line():
    """Issue 13: on a shared machine the chart was a flat 100% line (other jobs' CPU)."""
    report = cpu_report()
    series = dict(report.series)
    samples = dict(series["samples"])
    base = dict(samples["baseline"])
    base["cpu_util"] = [1.0] * len(base["t"])
    base["run_cpu_util"] = [0.4] * len(base["t"])
    samples["baseline"] = base
    series["samples"] = samples
    util = build_charts(replace(report, series=series))[2]
    assert util.title.startswith("CPU used by this run")
    assert "whole machine" in (util.svg or "")
    assert "CPU used by this run (% of all cores)" in (util.svg or "")


def test_per_variant_charts_say_they_draw_each_variants_first_run():
    """The Variants table pools every A/B run; the step and breakdown charts draw one run per
    variant (543 ms against the table's 686 ms on a busy machine): their titles say which."""
    charts = {c.key: c for c in build_charts(cpu_report())}
    assert charts["step_time"].title.endswith("(first run of each)")
    assert charts["breakdown"].title.endswith("(first run of each)")


def test_a_single_run_chart_has_no_first_run_note():
    report = cpu_report()
    series = {k: {"baseline": v["baseline"]} for k, v in report.series.items() if "baseline" in v}
    charts = {c.key: c for c in build_charts(replace(report, series=series, variants=()))}
    assert charts["step_time"].title == "Step time over steps"


def test_a_snapshot_memory_chart_names_its_lines_allocated_and_reserved():
    """`perfdoctor diagnose snapshot.pickle`: the legend read "trace" and "trace reserved"
    for a memory snapshot."""
    report = cpu_report()
    series = dict(report.series)
    series["memory"] = {
        "trace": {
            "t_s": [0.0, 1.0, 2.0],
            "allocated_bytes": [2**30, 3 * 2**30, 2**30],
            "reserved_bytes": [2 * 2**30, 4 * 2**30, 4 * 2**30],
        }
    }
    svg = build_charts(replace(report, series=series))[3].svg or ""
    assert "trace reserved" not in svg and "reserved" in svg


def test_a_breakdown_total_says_which_run_and_clock_it_is():
    """A bar's total read "571 ms" beside a table's 998 ms for the same variant: the bar is
    the first run's phase medians (on CUDA on the host's clock), the table the paired
    medians over every A/B run. The bar's label and the title say which."""
    report = cpu_report()
    charts = {c.key: c for c in build_charts(report)}
    assert "(run 1)" in (charts["breakdown"].svg or "")
    cuda = replace(report, device=replace(report.device, kind="cuda"))
    charts = {c.key: c for c in build_charts(cuda)}
    assert charts["breakdown"].title == "Step breakdown per variant, host clock (first run of each)"
    assert "(run 1, host)" in (charts["breakdown"].svg or "")
    assert "GPU clock" in (charts["step_time"].svg or "")


def test_a_profiled_sessions_charts_import_no_matplotlib():
    """Issue 30: matplotlib's import and five figures were about half of a profiled
    session's report CPU; every chart of a profile report is now written directly."""
    code = (
        "import sys\n"
        "from tests.unit.render.fixtures import cpu_report\n"
        "from perfdoctor.render.charts import build_charts\n"
        "charts = build_charts(cpu_report())\n"
        "assert all(c.svg for c in charts), [c.key for c in charts if not c.svg]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_power_is_drawn_against_its_own_right_axis():
    report = cpu_report()
    series = dict(report.series)
    series["samples"] = {
        "baseline": {"t": [0.0, 1.0], "gpu_util": [0.5, 0.9], "power_w": [100, 400]}
    }
    svg = build_charts(replace(report, series=series))[2].svg or ""
    # The right axis's ticks reach the power's scale (hundreds of W), the left's 100%.
    assert ">400<" in svg and ">100<" in svg
    assert "stroke-dasharray" in svg  # the power lines are dashed
