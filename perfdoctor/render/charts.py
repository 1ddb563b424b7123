"""The report's charts, as inline SVG strings, written directly (line_svg.py, bar_svg.py;
the roofline in compute_section.py by loglog_svg.py): no report loads matplotlib, whose
import alone was 0.75 s of CPU and drawing the five charts of a profiled session about
half of the parent's own CPU (issue 30). Only batch_section.py's batch-size curve, drawn
when a batch plan ran, is still a matplotlib figure, through `_render` below.

Only `Report.series` (and the baseline breakdown) is read; see the comment on `Report.series`
in model.py and docs/report-schema.md for its shape. A chart whose data is missing is not
drawn: it comes back with a one-line reason instead.

No pyplot and no GUI backend: a bare `Figure` renders through matplotlib's SVG backend, so
nothing global changes in the process. `svg.fonttype = none` keeps text as text (small files,
selectable labels); matplotlib escapes that text for XML, so a variant label such as
`<script>` stays text. Long series are reduced to per-bucket min/max so spikes survive and
a 10k-step run stays a few hundred KB. The axes are placed by `_fit`, where constrained
layout would put them, at about half of its cost.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from perfdoctor.model import Report
from perfdoctor.render import bar_svg, line_svg
from perfdoctor.render import format as fmt
from perfdoctor.render.summary import BREAKDOWN_PARTS
from perfdoctor.rundir import BASELINE_LABEL

_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)

MAX_POINTS = 1200  # per line, after min/max bucketing
_LEGEND_LABEL_CHARS = 40
_TICK_LABEL_CHARS = 24

_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "perfdoctor",  # stable element ids: the same report gives the same SVG
    "text.parse_math": False,  # `$` in a variant label is text, not mathtext
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
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


# The charts read only the series, the variants, the baseline and the device, and a report is
# rendered more than once while its size figure settles (diagnose.write_reports) and once per
# format: the last few results are kept, keyed by those inputs' identity (the inputs are
# held, so an id cannot be reused while its entry lives).
_CACHE_SIZE = 4
_cache: list[tuple[tuple[Any, ...], list[Chart]]] = []


def build_charts(report: Report) -> list[Chart]:
    inputs = (report.series, report.variants, report.baseline, report.device, report.source)
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
    isfinite = math.isfinite
    for x, y in zip(xs, ys, strict=False):
        # Plain floats and ints (a series read from JSON) are tested by their exact type,
        # which is quick on a 10k-step run; anything else (numpy scalars, bools, None)
        # goes through `_finite`.
        if type(x) in _PLAIN and type(y) in _PLAIN:
            if isfinite(x) and isfinite(y):
                out_x.append(float(x))
                out_y.append(float(y))
        elif _finite(x) and _finite(y):
            out_x.append(float(x))
            out_y.append(float(y))
    return out_x, out_y


_PLAIN = frozenset((int, float))


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


def _legend_label(label: str) -> str:
    return fmt.one_line(label, _LEGEND_LABEL_CHARS)


def _run_name(label: str, lines: Sequence[Any]) -> str:
    """The run's name in a legend, or "" when the chart draws one run only."""
    return _legend_label(label) if len(lines) > 1 else ""


def _group(series: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    group = series.get(name)
    return group if isinstance(group, Mapping) else {}


# --------------------------------------------------------------------------- rendering


_WIDTH_IN = 5.8
# The SVG backend draws at 72 dpi (a pixel is a point): figures are made at it, so that `_fit`
# measures what the file will hold.
_SVG_DPI = 72
# Padding between the decorations (tick labels, axis labels, outside legends) and the figure's
# edge: matplotlib's constrained-layout default, 3 points.
_PAD_IN = 3 / 72
# Where the axes start before `_fit` measures them (inches from the left, bottom, right and
# top edges): where one line of tick labels and an axis label leave them, so that for most
# charts the first measurement is already the answer.
_FIRST_GUESS_IN = (0.56, 0.44, 0.04, 0.04)
# A measurement that moved the axes by less than this (points) is not repeated.
_REFIT_PT = 2.0


def _figure(height: float = 3.0) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_WIDTH_IN, height), dpi=_SVG_DPI)
    left, bottom, right, top = _FIRST_GUESS_IN
    fig.subplots_adjust(
        left=left / _WIDTH_IN,
        bottom=bottom / height,
        right=1 - right / _WIDTH_IN,
        top=1 - top / height,
    )
    return fig


def _fit(fig: Any) -> None:
    """Move the axes (a twin shares their place) so that everything drawn outside them ends
    `_PAD_IN` inside the figure's edges: where `layout="constrained"` puts one cell's axes.

    Done by hand because a layout engine costs about half of a chart: savefig draws a figure
    that has one twice (once to settle the layout, once to write), and constrained layout
    measures every decoration twice per draw. Started from a first guess near the answer,
    one measurement gives the same place (to the pixel, on the charts here); a second is
    taken only when the first moved the axes enough to change what is drawn around them
    (other ticks, or a legend placed below them in axes units)."""
    from matplotlib.backends.backend_svg import RendererSVG
    from matplotlib.transforms import Bbox

    if not fig.axes:
        return
    width, height = fig.bbox.width, fig.bbox.height
    # The SVG backend's own renderer measures text as the file will be written.
    renderer = RendererSVG(width, height, io.StringIO())
    pad = _PAD_IN * fig.dpi
    for _ in range(2):
        ticks = _tick_locations(fig)
        placed = Bbox.union([ax.get_position().transformed(fig.transFigure) for ax in fig.axes])
        drawn = Bbox.union([ax.get_tightbbox(renderer, for_layout_only=True) for ax in fig.axes])
        box = Bbox.from_extents(
            placed.x0 - drawn.x0 + pad,
            placed.y0 - drawn.y0 + pad,
            width - (drawn.x1 - placed.x1 + pad),
            height - (drawn.y1 - placed.y1 + pad),
        )
        if box.width <= 0 or box.height <= 0:  # labels wider than the figure: leave it be
            return
        for ax in fig.axes:
            ax.set_position(box.transformed(fig.transFigure.inverted()))
        moved_pt = max(abs(a - b) for a, b in zip(box.extents, placed.extents, strict=True))
        if moved_pt * 72 / fig.dpi < _REFIT_PT and _tick_locations(fig) == ticks:
            return


def _tick_locations(fig: Any) -> list[list[float]]:
    return [[*ax.xaxis.get_majorticklocs(), *ax.yaxis.get_majorticklocs()] for ax in fig.axes]


def _to_svg(fig: Any) -> str:
    buf = io.StringIO()
    # No date and no creator URL: the SVG is reproducible and names no web address.
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    # Inline SVG in HTML5 needs neither the XML prolog and DOCTYPE (which names a DTD URL)
    # nor the RDF metadata block (which names vocabulary URLs): keep from `<svg` on, minus it.
    start = text.find("<svg")
    text = text[start:] if start >= 0 else text
    return _METADATA.sub("", text, count=1).strip()


def _render(draw: Any, *args: Any, height: float = 3.0) -> str:
    import matplotlib
    from cycler import cycler

    rc: dict[str, Any] = {**_RC, "axes.prop_cycle": cycler(color=list(_PALETTE))}
    # matplotlib's stubs key rc_context by a Literal of every rcParams name; ours are plain str.
    with matplotlib.rc_context(cast(Any, rc)):
        fig = _figure(height)
        draw(fig, *args)
        _fit(fig)
        return _to_svg(fig)


# --------------------------------------------------------------------------- the charts


def _first_run_note(count: int) -> str:
    # The series hold one run per variant (its first), while the Variants table pools every
    # A/B run: say so beside two or more variants, so the figures are not read as one pool.
    return " (first run of each)" if count > 1 else ""


def _too_few_points(lines: Sequence[tuple[str, Sequence[float], Sequence[float]]]) -> str:
    """Why a per-step line chart is not drawn ("" when it is): a single step draws no line,
    only axes around nothing (an interrupted run's report, issue 25 item 3)."""
    most = max((len(xs) for _, xs, _ in lines), default=0)
    if most >= 2:
        return ""
    return f"not drawn: {most} step recorded, a line needs 2 or more (see the table above)"


def _on_cuda(report: Report) -> bool:
    return report.device is not None and report.device.kind == "cuda"


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
    title = "Step time over steps" + _first_run_note(len(lines))
    if not lines:
        return Chart("step_time", title, None, "not measured: no per-step timing was recorded")
    if too_few := _too_few_points(lines):
        return Chart("step_time", title, None, too_few)

    # Headroom above the warm-up's label, which sat on the warm-up steps' line.
    tallest = max((y for _, _, ys in lines for y in ys), default=0.0)
    svg = line_svg.line_chart(
        [
            line_svg.Line(_legend_label(label), xs, ys, colors.get(label), 1.2)
            for label, xs, ys in lines
        ],
        xlabel="step",
        # On CUDA the step times are the GPU's clock (the tables' too), not the host's.
        ylabel="step time (ms, GPU clock)" if _on_cuda(report) else "step time (ms)",
        integer_x=True,  # steps are whole numbers
        y_bottom=0.0,
        y_top=tallest * 1.15 if warmup_end is not None and tallest > 0 else None,
        span=None if warmup_end is None else line_svg.Span(-0.5, warmup_end, "warm-up", 0.0),
    )
    return Chart("step_time", title, svg)


def _breakdown_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    table = dict(_group(series, "breakdown_ms"))
    # A diagnosed trace files its breakdown under its own label: no "baseline" to add.
    if BASELINE_LABEL not in table and report.baseline.breakdown_ms and report.source != "trace":
        table[BASELINE_LABEL] = dict(report.baseline.breakdown_ms)
    rows = []
    for label in _ordered(table):
        parts = table[label] if isinstance(table[label], Mapping) else {}
        values = {str(k): float(v) for k, v in parts.items() if _finite(v)}
        if values:
            rows.append((label, values))
    # The phases are timed on the host: on CUDA a bar is the host's step, which can be far
    # shorter than the GPU-clock step time of the tables; and a bar is one run's medians.
    clock = ", host clock" if _on_cuda(report) else ""
    title = "Step breakdown per variant" + clock + _first_run_note(len(rows))
    if not rows:
        return Chart("breakdown", title, None, "not measured: no per-phase timing was recorded")
    parts_seen = [p for p in BREAKDOWN_PARTS if any(p in v for _, v in rows)]
    parts_seen += sorted({p for _, v in rows for p in v} - set(parts_seen))

    totals = [sum(values.get(part, 0.0) for part in parts_seen) for _, values in rows]
    # Each total says which run (and on CUDA which clock) it is: the Variants table's step
    # times are the paired medians over every A/B run, a different figure.
    source = [s for s in ("run 1" if len(rows) > 1 else "", "host" if clock else "") if s]
    suffix = f" ({', '.join(source)})" if source else ""
    svg = bar_svg.stacked_bars(
        [
            bar_svg.Bar(
                fmt.one_line(label, _TICK_LABEL_CHARS),
                [values.get(part, 0.0) for part in parts_seen],
                f" {fmt.ms(total)}{suffix}",
            )
            for (label, values), total in zip(rows, totals, strict=True)
        ],
        [
            bar_svg.Part(_legend_label(part), _PART_COLORS.get(part, _PALETTE[i % len(_PALETTE)]))
            for i, part in enumerate(parts_seen)
        ],
        xlabel="time per step (ms" + (", host clock)" if clock else ")"),
        x_max=max(totals) * (1.35 if suffix else 1.18) if max(totals) > 0 else 1.0,
        height_in=1.6 + 0.45 * len(rows),
        columns=min(len(parts_seen), 6),
    )
    return Chart("breakdown", title, svg)


def _utilization_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    samples = _group(series, "samples")
    util_lines, power_lines = [], []
    uses_gpu = any(
        isinstance(row, Mapping) and _pairs(row.get("t"), row.get("gpu_util"))[0]
        for row in samples.values()
    )
    util_key = "gpu_util" if uses_gpu else "cpu_util"
    machine_lines = []
    for label in _ordered(samples):
        row = samples[label] if isinstance(samples[label], Mapping) else {}
        xs, ys = _pairs(row.get("t"), row.get(util_key))
        own_xs, own_ys = _pairs(row.get("t"), row.get("run_cpu_util"))
        if not uses_gpu and own_xs:
            # On CPU the run's own processes are the line; the machine's busy share (other
            # jobs included: a flat 100% on a shared machine) is drawn faintly for context.
            util_lines.append((label, *downsample(own_xs, [y * 100 for y in own_ys])))
            if xs:
                machine_lines.append((label, *downsample(xs, [y * 100 for y in ys])))
        elif xs:
            # Utilization arrives as a fraction (0..1); people read percent.
            util_lines.append((label, *downsample(xs, [y * 100 for y in ys])))
        xs, ys = _pairs(row.get("t"), row.get("power_w"))
        if xs:
            power_lines.append((label, *downsample(xs, ys)))
    title = "GPU utilization and power over time" if uses_gpu else "CPU utilization over time"
    if machine_lines:
        title = "CPU used by this run over time (dotted: the whole machine)"
    if power_lines and not uses_gpu:
        title = "CPU utilization and power over time"
    if not util_lines and not power_lines:
        return Chart(
            "utilization",
            "Utilization over time",
            None,
            "not measured: no device samples (NVML or psutil) were recorded",
        )

    util_ylabel = (
        "GPU utilization (%)"
        if uses_gpu
        else "CPU used by this run (% of all cores)"
        if machine_lines
        else "CPU utilization (% of all cores)"
    )
    lines = [
        line_svg.Line(_legend_label(label), xs, ys, colors.get(label))
        for label, xs, ys in util_lines
    ]
    lines += [
        line_svg.Line(
            _legend_label(f"{label}: whole machine"),
            xs,
            ys,
            colors.get(label),
            width=0.8,
            dash=line_svg.DOTTED,
            opacity=0.6,
        )
        for label, xs, ys in machine_lines
    ]
    right_axis = None
    if power_lines:
        right_axis = line_svg.RightAxis(
            [
                line_svg.Line(
                    _legend_label(f"{label} power"),
                    xs,
                    ys,
                    colors.get(label),
                    width=1.0,
                    dash=line_svg.DASHED,
                )
                for label, xs, ys in power_lines
            ],
            "power (W, dashed)",
        )
    svg = line_svg.line_chart(
        lines,
        xlabel="time since the script started (s)",
        ylabel=util_ylabel,
        y_bottom=0.0,
        y_top=105.0,
        right_axis=right_axis,
    )
    return Chart("utilization", title, svg)


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


def _reported_peaks(report: Report, source: str) -> dict[str, int]:
    """The peak each report table states, by label, when the chart draws the same quantity
    (allocated CUDA memory; process RSS on a CPU run): the chart labels that figure, so the
    chart and the summary never disagree."""
    on_cpu = report.device is not None and report.device.kind == "cpu"
    if source != "allocated device memory" and not (source == "process RSS" and on_cpu):
        return {}
    peaks: dict[str, int] = {}
    if report.baseline.peak_memory_bytes is not None:
        peaks[BASELINE_LABEL] = report.baseline.peak_memory_bytes
    for variant in report.variants:
        if variant.peak_memory_bytes is not None:
            peaks[variant.label] = variant.peak_memory_bytes
    return peaks


# Peak labels closer than this share of the y axis are moved apart.
_LABEL_GAP_FRAC = 0.07


def _spread_labels(ys: list[float], top: float) -> list[float]:
    """Label heights, in the order given, at least _LABEL_GAP_FRAC x top apart."""
    gap = top * _LABEL_GAP_FRAC
    order = sorted(range(len(ys)), key=ys.__getitem__)
    placed: dict[int, float] = {}
    last = None
    for i in order:
        y = ys[i] if last is None else max(ys[i], last + gap)
        placed[i] = y
        last = y
    return [placed[i] for i in range(len(ys))]


def _memory_chart(report: Report, series: Mapping[str, Any], colors: dict[str, str]) -> Chart:
    source, lines = _memory_lines(series)
    if not lines:
        return Chart(
            "memory",
            "Memory over time",
            None,
            "not measured: no memory history or memory samples were recorded",
        )
    reported = _reported_peaks(report, source)
    # Each line's peak: the report's figure where it states one for this quantity.
    peaks = [max(reported.get(label, peak_y), peak_y) for label, *_, peak_y in lines]
    title = f"Memory over time ({source}), peak marked"
    top = max(peaks)
    unit, scale = ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)
    label_ys = _spread_labels([p / scale for p in peaks], top / scale * 1.2)

    # A snapshot's history also gives the cache the allocator reserved (dashed): the gap
    # between the lines is memory cached but holding no tensor.
    reserved: dict[str, tuple[list[float], list[float]]] = {}
    from_snapshot = source == "allocated device memory"
    if from_snapshot:
        group = _group(series, "memory")
        for label, *_ in lines:
            row = group.get(label)
            if not isinstance(row, Mapping):
                row = {}
            xs, ys = _pairs(row.get("t_s"), row.get("reserved_bytes"))
            if xs:
                reserved[label] = downsample(xs, ys)
                top = max(top, max(ys))

    drawn: list[line_svg.Line] = []
    markers, levels, notes = [], [], []
    for (label, xs, ys, peak_x, peak_y), peak, label_y in zip(lines, peaks, label_ys, strict=True):
        color = colors.get(label)
        name = _run_name(label, lines)
        if label in reserved:
            rx, ry = reserved[label]
            drawn.append(
                line_svg.Line(
                    f"{name} reserved" if name else "reserved",
                    rx,
                    [y / scale for y in ry],
                    color,
                    width=1.0,
                    dash=line_svg.DASHED,
                )
            )
        # Beside its reserved line the solid one is the allocated memory; one run's lines
        # need no run name (a snapshot's label is just "trace").
        line_label = (
            (f"{name} allocated" if name else "allocated")
            if label in reserved
            else (_legend_label(label))
        )
        drawn.append(line_svg.Line(line_label, xs, [y / scale for y in ys], color))
        if peak == peak_y:
            markers.append(line_svg.Marker(peak_x, peak_y / scale, color))
        else:  # reached between the drawn samples (or in another run of the variant)
            levels.append(line_svg.Level(peak / scale, color))
        text = f"peak {fmt.nbytes(peak)}" + ("" if len(lines) == 1 else f" ({label})")
        notes.append(line_svg.Note(label_y, text, color))
    svg = line_svg.line_chart(
        drawn,
        xlabel=(
            "time since the allocator history began (s)"
            if from_snapshot
            else "time since the script started (s)"
        ),
        ylabel=f"{'device memory' if reserved else source} ({unit})",
        y_bottom=0.0,
        y_top=max(top / scale * 1.15, max(label_ys) * 1.08),
        markers=markers,
        levels=levels,
        notes=notes,
        legend_at="lower right" if reserved else "best",
    )
    return Chart("memory", title, svg)


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
    if too_few := _too_few_points(lines):
        return Chart("loss", title, None, too_few)

    svg = line_svg.line_chart(
        [line_svg.Line(_legend_label(label), xs, ys, colors.get(label)) for label, xs, ys in lines],
        xlabel="step",
        ylabel="loss",
        integer_x=True,  # steps are whole numbers
    )
    return Chart("loss", title, svg)
