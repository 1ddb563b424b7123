"""The report's charts: inline SVG strings drawn by render/svgplot.py.

Only `Report.series` (and the baseline breakdown) is read; see the comment on `Report.series`
in model.py and docs/report-schema.md for its shape. A chart whose data is missing is not
drawn: it comes back with a one-line reason instead.

The SVG is written directly (svgplot.py), not through matplotlib: importing matplotlib and
laying out the five figures cost about 0.75 s of CPU per report, a quarter of the 3 s budget
for a 200 MB trace, for a few lines and bars. Text is XML-escaped, so a variant label such as
`<script>` stays text; the same report gives the same SVG. Long series are reduced to
per-bucket min/max so spikes survive and a 10k-step run stays a few hundred KB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.model import Report
from perfdoctor.render import format as fmt
from perfdoctor.render.summary import BREAKDOWN_PARTS
from perfdoctor.render.svgplot import BarPlot, LinePlot
from perfdoctor.rundir import BASELINE_LABEL

MAX_POINTS = 1200  # per line, after min/max bucketing
_LEGEND_LABEL_CHARS = 40
_TICK_LABEL_CHARS = 24

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
_BASELINE_COLOR = "#555555"
_PART_COLORS = {
    "data": "#c44e52",
    "forward": "#4c72b0",
    "backward": "#8172b3",
    "optimizer": "#55a868",
    "other": "#b0b0b0",
}


@dataclass(frozen=True)
class Chart:
    key: str  # stable id: step_time, breakdown, utilization, memory, loss
    title: str
    svg: str | None  # inline `<svg ...>` markup; None when the chart was skipped
    missing: str = ""  # "not measured: why", when skipped


# The charts read only the series, the variants and the baseline breakdown, and a report is
# rendered more than once while its size figure settles (diagnose.write_reports) and once per
# format: the last few results are kept, keyed by those inputs' identity (the inputs are
# held, so an id cannot be reused while its entry lives).
_CACHE_SIZE = 4
_cache: list[tuple[tuple[Any, ...], list[Chart]]] = []


def build_charts(report: Report) -> list[Chart]:
    inputs = (report.series, report.variants, report.baseline.breakdown_ms)
    for key, charts in _cache:
        if all(a is b for a, b in zip(key, inputs, strict=True)):
            return list(charts)
    charts = _build_charts(report)
    _cache.append((inputs, charts))
    del _cache[:-_CACHE_SIZE]
    return list(charts)


def _build_charts(report: Report) -> list[Chart]:
    series = report.series or {}
    colors = _label_colors(report, series)
    builders = (
        _step_time_chart,
        _breakdown_chart,
        _utilization_chart,
        _memory_chart,
        _loss_chart,
    )
    return [build(report, series, colors) for build in builders]


# --------------------------------------------------------------------------- data helpers


def _label_colors(report: Report, series: Mapping[str, Any]) -> dict[str, str]:
    """One colour per variant across every chart, the baseline always grey."""
    labels: list[str] = [BASELINE_LABEL, *(v.label for v in report.variants)]
    for group in series.values():
        if isinstance(group, Mapping):
            labels += [str(k) for k in group]
    colors: dict[str, str] = {}
    for label in labels:
        if label in colors:
            continue
        colors[label] = (
            _BASELINE_COLOR
            if label == BASELINE_LABEL
            else _PALETTE[(len(colors) - (BASELINE_LABEL in colors)) % len(_PALETTE)]
        )
    return colors


def _ordered(group: Mapping[str, Any]) -> list[str]:
    """Baseline first, then the other variants in the order the series holds them."""
    labels = [str(k) for k in group]
    return sorted(labels, key=lambda k: (k != BASELINE_LABEL, labels.index(k)))


def _pairs(xs: Sequence[Any] | None, ys: Sequence[Any] | None) -> tuple[list[float], list[float]]:
    """Aligned (x, y) with missing or non-finite values dropped."""
    if not xs or not ys:
        return [], []
    out_x: list[float] = []
    out_y: list[float] = []
    for x, y in zip(xs, ys, strict=False):
        if _finite(x) and _finite(y):
            out_x.append(float(x))
            out_y.append(float(y))
    return out_x, out_y


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def downsample(
    xs: list[float], ys: list[float], max_points: int = MAX_POINTS
) -> tuple[list[float], list[float]]:
    """Keep each bucket's min and max (in x order) so spikes stay visible."""
    n = len(xs)
    if n <= max_points:
        return xs, ys
    buckets = max(max_points // 2, 1)
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo >= hi:
            continue
        window = range(lo, hi)
        i_min = min(window, key=ys.__getitem__)
        i_max = max(window, key=ys.__getitem__)
        for i in sorted({i_min, i_max}):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y


def _color(colors: dict[str, str], label: str) -> str:
    return colors.get(label, _PALETTE[0])


def _legend_label(label: str) -> str:
    return fmt.one_line(label, _LEGEND_LABEL_CHARS)


def _group(series: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    group = series.get(name)
    return group if isinstance(group, Mapping) else {}


# --------------------------------------------------------------------------- the charts


def _step_time_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    steps = _group(series, "steps")
    lines = []
    warmup_end: float | None = None
    for label in _ordered(steps):
        row = steps[label] if isinstance(steps[label], Mapping) else {}
        # step_ms: the GPU's clock on CUDA runs; reports written before it existed have wall_ms.
        xs, ys = _pairs(row.get("index"), row.get("step_ms") or row.get("wall_ms"))
        if xs:
            lines.append((label, *downsample(xs, ys)))
        if label == BASELINE_LABEL and row.get("phase") and row.get("index"):
            warm = [i for i, p in zip(row["index"], row["phase"], strict=False) if p == "warmup"]
            warmup_end = max(warm) + 0.5 if warm and _finite(max(warm)) else None
    title = "Step time over steps"
    if not lines:
        return Chart("step_time", title, None, "not measured: no per-step timing was recorded")

    plot = LinePlot(key="step_time", xlabel="step", ylabel="step time (ms)", y_bottom=0.0)
    if warmup_end is not None:
        plot.shade(-0.5, warmup_end, " warm-up")
    for label, xs, ys in lines:
        plot.line(xs, ys, _color(colors, label), width=1.2, label=_legend_label(label))
    return Chart("step_time", title, plot.svg())


def _breakdown_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    table = dict(_group(series, "breakdown_ms"))
    if BASELINE_LABEL not in table and report.baseline.breakdown_ms:
        table[BASELINE_LABEL] = dict(report.baseline.breakdown_ms)
    rows = []
    for label in _ordered(table):
        parts = table[label] if isinstance(table[label], Mapping) else {}
        values = {str(k): float(v) for k, v in parts.items() if _finite(v)}
        if values:
            rows.append((label, values))
    title = "Step breakdown per variant"
    if not rows:
        return Chart("breakdown", title, None, "not measured: no per-phase timing was recorded")
    parts_seen = [p for p in BREAKDOWN_PARTS if any(p in v for _, v in rows)]
    parts_seen += sorted({p for _, v in rows for p in v} - set(parts_seen))

    names = [fmt.one_line(label, _TICK_LABEL_CHARS) for label, _ in rows]
    parts = [
        (
            _legend_label(part),
            _PART_COLORS.get(part, _PALETTE[i % len(_PALETTE)]),
            [values.get(part, 0.0) for _, values in rows],
        )
        for i, part in enumerate(parts_seen)
    ]
    totals = [f" {fmt.ms(sum(values.get(p, 0.0) for p in parts_seen))}" for _, values in rows]
    plot = BarPlot(rows=names, parts=parts, totals=totals, xlabel="time per step (ms)")
    return Chart("breakdown", title, plot.svg())


def _utilization_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    samples = _group(series, "samples")
    util_lines, power_lines = [], []
    uses_gpu = any(
        isinstance(row, Mapping) and _pairs(row.get("t"), row.get("gpu_util"))[0]
        for row in samples.values()
    )
    util_key = "gpu_util" if uses_gpu else "cpu_util"
    for label in _ordered(samples):
        row = samples[label] if isinstance(samples[label], Mapping) else {}
        xs, ys = _pairs(row.get("t"), row.get(util_key))
        if xs:
            # Utilization arrives as a fraction (0..1); people read percent.
            util_lines.append((label, *downsample(xs, [y * 100 for y in ys])))
        xs, ys = _pairs(row.get("t"), row.get("power_w"))
        if xs:
            power_lines.append((label, *downsample(xs, ys)))
    title = "GPU utilization and power over time" if uses_gpu else "CPU utilization over time"
    if power_lines and not uses_gpu:
        title = "CPU utilization and power over time"
    if not util_lines and not power_lines:
        return Chart(
            "utilization",
            "Utilization over time",
            None,
            "not measured: no device samples (NVML or psutil) were recorded",
        )

    plot = LinePlot(
        key="utilization",
        xlabel="time since the script started (s)",
        ylabel="GPU utilization (%)" if uses_gpu else "CPU utilization (% of all cores)",
        ylabel_right="power (W, dashed)" if power_lines else "",
        y_bottom=0.0,
        y_top=105.0,
        y_right_bottom=0.0,
        legend_loc="lower right",
    )
    for label, xs, ys in util_lines:
        plot.line(xs, ys, _color(colors, label), width=1.1, label=_legend_label(label))
    for label, xs, ys in power_lines:
        plot.line(
            xs,
            ys,
            _color(colors, label),
            width=1.0,
            dashed=True,
            right=True,
            label=_legend_label(f"{label} power"),
        )
    return Chart("utilization", title, plot.svg())


_MemoryLine = tuple[str, list[float], list[float], float, float]  # label, xs, ys, peak x, y


def _memory_lines(series: Mapping[str, Any]) -> tuple[str, list[_MemoryLine]]:
    """Device allocator history when there is one (CUDA), else the sampled memory."""
    candidates = (
        ("memory", "t_s", "allocated_bytes", "allocated device memory"),
        ("samples", "t", "mem_used_bytes", "device memory used"),
        ("samples", "t", "rss_bytes", "process RSS"),
    )
    for group_name, x_key, y_key, source in candidates:
        group = _group(series, group_name)
        lines: list[_MemoryLine] = []
        for label in _ordered(group):
            row = group[label] if isinstance(group[label], Mapping) else {}
            xs, ys = _pairs(row.get(x_key), row.get(y_key))
            if not xs:
                continue
            # The peak is taken from the full series: downsampling keeps it, but the
            # marker must not depend on that.
            peak = max(range(len(ys)), key=ys.__getitem__)
            lines.append((label, *downsample(xs, ys), xs[peak], ys[peak]))
        if lines:
            return source, lines
    return "", []


def _memory_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    source, lines = _memory_lines(series)
    if not lines:
        return Chart(
            "memory",
            "Memory over time",
            None,
            "not measured: no memory history or memory samples were recorded",
        )
    title = f"Memory over time ({source}), peak marked"
    top = max(peak_y for *_, peak_y in lines)
    unit, scale = ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)

    plot = LinePlot(
        key="memory",
        xlabel="time since the script started (s)",
        ylabel=f"{source} ({unit})",
        y_bottom=0.0,
        y_top=top / scale * 1.15,
    )
    for label, xs, ys, peak_x, peak_y in lines:
        color = _color(colors, label)
        plot.line(xs, [y / scale for y in ys], color, width=1.1, label=_legend_label(label))
        plot.mark(peak_x, peak_y / scale, color, f"peak {fmt.nbytes(peak_y)}")
    return Chart("memory", title, plot.svg())


def _loss_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    steps = _group(series, "steps")
    lines = []
    for label in _ordered(steps):
        row = steps[label] if isinstance(steps[label], Mapping) else {}
        xs, ys = _pairs(row.get("index"), row.get("loss"))
        if xs:
            lines.append((label, *downsample(xs, ys)))
    title = "Loss per step (same seed in every variant)"
    if not lines:
        return Chart("loss", title, None, "not measured: no loss value was captured")

    plot = LinePlot(key="loss", xlabel="step", ylabel="loss")
    for label, xs, ys in lines:
        plot.line(xs, ys, _color(colors, label), width=1.1, label=_legend_label(label))
    return Chart("loss", title, plot.svg())
