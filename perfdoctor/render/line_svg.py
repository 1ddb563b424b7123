"""Line charts over steps (step time, loss) written as SVG directly, without matplotlib.

Every diagnosed trace's report draws the step time, and drawing it with matplotlib cost
`perfdoctor diagnose` about 0.9 s of CPU (0.75 s of it matplotlib's import), a fifth of the
whole command on a 180 MB trace (issue 30). Written by hand it costs milliseconds. The
other charts a trace's report can draw are written the same way (bar_svg.py, loglog_svg.py).

They keep the look of the matplotlib charts beside them (render/charts.py): a 5.8 x 3 inch
figure at 72 dpi (a pixel is a point), the same palette and sans-serif text (9 px, legend
8 px, kept as text), left and bottom spines only, a light grid, ticks outside, axes limits
at the data plus a 5% margin, tick steps of 1, 2, 2.5 or 5 times a power of ten, and the
legend in the corner its lines cross least. Text widths are estimated from the font's
advance widths (DejaVu Sans, matplotlib's default), enough to place the axes the way
charts._fit does: everything drawn outside them ends 3 points inside the figure's edge.
Every text goes through html.escape, so a variant label such as `<script>` stays text.
The output is a pure function of its input: the same report gives the same SVG.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

WIDTH_IN = 5.8
DPI = 72
PAD = 3.0  # points between the outermost decoration and the figure's edge
TICK_SIZE = 9.0  # tick labels and axis labels (px = pt)
LEGEND_SIZE = 8.0
TICK_LEN = 3.5
TICK_PAD = 3.5
LABEL_PAD = 4.0
MARGIN = 0.05  # of the data range, on each side of an axis whose limit is not given
# matplotlib's AutoLocator: at most 9 intervals, and a tick label every 3 (x) or 2 (y)
# font sizes at least.
MAX_BINS = 9
_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
_INT_STEPS = (1.0, 2.0, 5.0, 10.0)
FONT = (
    "font-family: 'DejaVu Sans', 'Bitstream Vera Sans', 'Lucida Grande', 'Verdana', "
    "'Geneva', 'Arial', 'Helvetica', sans-serif"
)
GRID = 'stroke="#b0b0b0" stroke-opacity="0.3" stroke-width="0.8"'
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
LINE_HEIGHT = 1.17  # of the font size: one line of DejaVu Sans, ascent plus descent
ASCENT = 0.76  # of the font size, above the baseline
# Advance widths of DejaVu Sans in em, for the characters tick labels are made of; other
# characters take the average of its lower-case letters.
_ADVANCE = {
    **dict.fromkeys("0123456789", 0.636),
    ".": 0.318,
    ",": 0.318,
    " ": 0.318,
    "−": 0.838,
    "-": 0.361,
    "+": 0.838,
    "e": 0.615,
    "(": 0.39,
    ")": 0.39,
    "%": 0.95,
    "i": 0.278,
    "l": 0.278,
    "t": 0.392,
    "f": 0.352,
    "r": 0.411,
    "m": 0.974,
    "w": 0.818,
}
_DEFAULT_ADVANCE = 0.6


@dataclass(frozen=True)
class Line:
    label: str  # legend text (shortened by the caller)
    xs: Sequence[float]
    ys: Sequence[float]
    color: str | None = None  # None: the palette's next colour
    width: float = 1.1
    dash: str = ""  # "": solid; DASHED or DOTTED (matplotlib's "--" and ":" at this width)
    opacity: float = 1.0


# matplotlib's dash patterns, in multiples of the line width.
DASHED = "3.7,1.6"
DOTTED = "1,1.65"


@dataclass(frozen=True)
class Marker:
    """A downward triangle at a data point (a line's peak)."""

    x: float
    y: float
    color: str | None = None


@dataclass(frozen=True)
class Level:
    """A dotted horizontal line across the axes at a data value."""

    y: float
    color: str | None = None


@dataclass(frozen=True)
class Note:
    """Small text ending at the axes' right edge, its baseline just above a data value."""

    y: float
    text: str
    color: str | None = None


@dataclass(frozen=True)
class RightAxis:
    """Lines drawn against a second y axis on the right (power beside utilization)."""

    lines: Sequence[Line]
    label: str


@dataclass(frozen=True)
class Span:
    """A shaded stretch of the x axis with a label at its top left (the warm-up steps)."""

    x0: float
    x1: float
    label: str
    label_at: float  # the x value the label starts at


def text_width(text: str, size: float) -> float:
    return size * sum(_ADVANCE.get(c, _DEFAULT_ADVANCE) for c in text)


def _limits(values: Sequence[float], low: float | None, high: float | None) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    span = hi - lo
    pad = span * MARGIN if span > 0 else (abs(hi) * MARGIN or 0.5)
    lo = lo - pad if low is None else low
    hi = hi + pad if high is None else high
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


def ticks(lo: float, hi: float, bins: int, integer: bool = False) -> list[float]:
    """Tick values inside [lo, hi]: multiples of the smallest 'nice' step that cuts the
    range into at most `bins` intervals (whole numbers only when `integer`)."""
    bins = max(1, min(bins, MAX_BINS))
    raw = (hi - lo) / bins
    scale = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = scale * 10
    for s in _INT_STEPS if integer else _STEPS:
        if s * scale >= raw * (1 - 1e-9):
            step = s * scale
            break
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [k * step for k in range(first, last + 1)]


def tick_labels(values: Sequence[float]) -> list[str]:
    """The values with as many decimals as their step needs, the minus sign typeset (as
    matplotlib does); very large or very small values in compact exponent form."""
    if not values:
        return []
    step = abs(values[1] - values[0]) if len(values) > 1 else abs(values[0]) or 1.0
    biggest = max(abs(v) for v in values)
    if biggest >= 1e6 or step < 1e-4:
        texts = [f"{v:.4g}" for v in values]
    else:
        decimals = next((d for d in range(7) if abs(round(step, d) - step) <= step * 1e-6), 6)
        texts = [f"{v:.{decimals}f}" for v in values]
    out = []
    for text in texts:
        if text.lstrip("-").strip("0.") == "":  # -0.0 is 0
            text = text.lstrip("-")
        out.append(text.replace("-", "−"))
    return out


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def coord(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class _Frame:
    """The axes' box in figure points, and the data limits it shows."""

    left: float
    top: float
    right: float
    bottom: float
    x0: float
    x1: float
    y0: float
    y1: float

    def x(self, value: float) -> float:
        return self.left + (value - self.x0) / (self.x1 - self.x0) * (self.right - self.left)

    def y(self, value: float) -> float:
        return self.bottom - (value - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top)


def line_chart(
    lines: Sequence[Line],
    *,
    xlabel: str,
    ylabel: str,
    integer_x: bool = False,
    y_bottom: float | None = None,
    y_top: float | None = None,
    span: Span | None = None,
    height_in: float = 3.0,
    right_axis: RightAxis | None = None,
    markers: Sequence[Marker] = (),
    levels: Sequence[Level] = (),
    notes: Sequence[Note] = (),
    legend_at: str = "best",
) -> str:
    """One SVG chart of `lines` (each with at least one point; `lines` may be empty when
    `right_axis` has some); a legend when there are two or more lines in all. `legend_at`:
    "best" (the corner the lines cross least) or "lower right"."""
    width, height = WIDTH_IN * DPI, height_in * DPI
    right_lines = list(right_axis.lines) if right_axis is not None else []
    xs_all = [x for line in (*lines, *right_lines) for x in line.xs]
    ys_all = [y for line in lines for y in line.ys] or [0.0]
    x0, x1 = _limits(xs_all, None, None)
    y0, y1 = _limits(ys_all, y_bottom, y_top)
    line_h = TICK_SIZE * LINE_HEIGHT
    bottom = height - (PAD + line_h + LABEL_PAD + line_h + TICK_PAD + TICK_LEN)
    top = PAD
    y_ticks = ticks(y0, y1, int((bottom - top) // (TICK_SIZE * 2)))
    y_labels = tick_labels(y_ticks)
    widest = max((text_width(t, TICK_SIZE) for t in y_labels), default=0.0)
    left = PAD + line_h + LABEL_PAD + widest + TICK_PAD + TICK_LEN
    right_edge = width - PAD
    r_frame_limits: tuple[float, float] | None = None
    r_ticks: list[float] = []
    r_labels: list[str] = []
    if right_lines:
        # The second axis starts at 0 (power), matplotlib's set_ylim(bottom=0).
        r0, r1 = _limits([y for line in right_lines for y in line.ys], 0.0, None)
        r_ticks = ticks(r0, r1, int((bottom - top) // (TICK_SIZE * 2)))
        r_labels = tick_labels(r_ticks)
        r_widest = max((text_width(t, TICK_SIZE) for t in r_labels), default=0.0)
        right_edge -= line_h + LABEL_PAD + r_widest + TICK_PAD + TICK_LEN
        r_frame_limits = (r0, r1)
    right = right_edge
    x_ticks = ticks(x0, x1, int((right - left) // (TICK_SIZE * 3)), integer=integer_x)
    x_labels = tick_labels(x_ticks)
    # The last x tick label may stick out past the axes: keep it inside the figure.
    if x_ticks:
        over = (x_ticks[-1] - x0) / (x1 - x0) * (right - left) + left
        overhang = over + text_width(x_labels[-1], TICK_SIZE) / 2 - (width - PAD)
        right -= max(0.0, overhang)
    frame = _Frame(left, top, right, bottom, x0, x1, y0, y1)
    r_frame = (
        None
        if r_frame_limits is None
        else _Frame(left, top, right, bottom, x0, x1, r_frame_limits[0], r_frame_limits[1])
    )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{coord(width)}pt" '
        f'height="{coord(height)}pt" viewBox="0 0 {coord(width)} {coord(height)}" version="1.1">',
        f'<rect width="{coord(width)}" height="{coord(height)}" fill="#ffffff"/>',
    ]
    if span is not None:
        parts.append(_span(frame, span))
    parts += _grid_and_ticks(frame, x_ticks, x_labels, y_ticks, y_labels)
    if r_frame is not None:
        parts += _right_ticks(r_frame, r_ticks, r_labels)
    drawn = [(line, frame) for line in lines]
    if r_frame is not None:
        drawn += [(line, r_frame) for line in right_lines]
    colors = [line.color or PALETTE[i % len(PALETTE)] for i, (line, _) in enumerate(drawn)]
    for (line, on), color in zip(drawn, colors, strict=True):
        parts.append(_polyline(on, line, color))
    for level in levels:
        y = coord(frame.y(level.y))
        parts.append(
            f'<path d="M {coord(left)} {y} L {coord(right)} {y}" fill="none" '
            f'stroke="{level.color or PALETTE[0]}" stroke-width="0.8" '
            f'stroke-dasharray="{_dashes(DOTTED, 0.8)}"/>'
        )
    for marker in markers:
        # matplotlib's "v" at 7 points: a triangle 7 points across, pointing down.
        cx, cy, r = frame.x(marker.x), frame.y(marker.y), 3.5
        parts.append(
            f'<path d="M {coord(cx - r)} {coord(cy - r)} L {coord(cx + r)} {coord(cy - r)} '
            f'L {coord(cx)} {coord(cy + r)} Z" fill="{marker.color or PALETTE[0]}"/>'
        )
    for note in notes:
        parts.append(
            svg_text(
                right - 4, frame.y(note.y) - 3, note.text, LEGEND_SIZE, "end", note.color or ""
            )
        )
    # The spines over the lines, as matplotlib draws them (a right one with a second axis).
    parts.append(spines(left, top, right, bottom, right_spine=r_frame is not None))
    label_y = height - PAD - line_h + TICK_SIZE * ASCENT
    parts.append(svg_text((left + right) / 2, label_y, xlabel, TICK_SIZE, "middle"))
    mid = (top + bottom) / 2
    label_x = PAD + TICK_SIZE * ASCENT
    parts.append(vertical_text(label_x, mid, ylabel))
    if r_frame is not None:
        label_x = width - PAD - TICK_SIZE * (LINE_HEIGHT - ASCENT)
        parts.append(vertical_text(label_x, mid, right_axis.label if right_axis else ""))
    if len(drawn) > 1:
        # Each legend entry in its colour, and a right-axis line's points in the left axis's
        # units, where the legend looks for the corner its lines cross least.
        keyed = [
            replace(
                line,
                color=color,
                ys=[
                    frame.y0
                    + (on.y(v) - frame.y(frame.y0))
                    / (frame.y(frame.y1) - frame.y(frame.y0))
                    * (frame.y1 - frame.y0)
                    for v in line.ys
                ],
            )
            if on is not frame
            else replace(line, color=color)
            for (line, on), color in zip(drawn, colors, strict=True)
        ]
        # The legend keeps clear of the peak notes and levels too, not only of the lines.
        avoid = [
            (right - 4 - k / 4 * text_width(note.text, LEGEND_SIZE), frame.y(note.y) - 5)
            for note in notes
            for k in range(5)
        ]
        avoid += [
            (left + k / 10 * (right - left), frame.y(level.y))
            for level in levels
            for k in range(11)
        ]
        parts.append(_legend(frame, keyed, legend_at, avoid))
    parts.append("</svg>")
    return "\n".join(parts)


def spines(left: float, top: float, right: float, bottom: float, right_spine: bool = False) -> str:
    """The axes' left and bottom spines (and a right one beside a second axis), drawn over
    the data as matplotlib draws them."""
    d = f"M {coord(left)} {coord(top)} L {coord(left)} {coord(bottom)} L {coord(right)} "
    d += f"{coord(bottom)}"
    if right_spine:
        d += f" L {coord(right)} {coord(top)}"
    return (
        f'<path d="{d}" fill="none" stroke="#000000" stroke-width="0.8" stroke-linecap="square"/>'
    )


def vertical_text(x: float, y: float, text: str) -> str:
    """An axis label turned a quarter to the left, centred on (x, y)."""
    return (
        f'<text x="{coord(x)}" y="{coord(y)}" transform="rotate(-90 {coord(x)} {coord(y)})" '
        f'style="font-size: {coord(TICK_SIZE)}px; {FONT}; text-anchor: middle">{_esc(text)}</text>'
    )


def _dashes(pattern: str, width: float) -> str:
    return ",".join(coord(float(p) * width) for p in pattern.split(","))


def _polyline(frame: _Frame, line: Line, color: str) -> str:
    points = " ".join(
        f"{coord(frame.x(x))},{coord(frame.y(y))}" for x, y in zip(line.xs, line.ys, strict=True)
    )
    style = f' stroke-dasharray="{_dashes(line.dash, line.width)}"' if line.dash else ""
    if line.opacity < 1.0:
        style += f' stroke-opacity="{coord(line.opacity)}"'
    return (
        f'<polyline points="{points}" fill="none" stroke="{color}" '
        f'stroke-width="{coord(line.width)}" stroke-linejoin="round" '
        f'stroke-linecap="{"butt" if line.dash else "square"}"{style}/>'
    )


def _right_ticks(frame: _Frame, values: Sequence[float], labels: Sequence[str]) -> list[str]:
    marks, texts = [], []
    beside = frame.right + TICK_LEN + TICK_PAD
    for value, label in zip(values, labels, strict=True):
        y = coord(frame.y(value))
        marks.append(f"M {coord(frame.right)} {y} l {coord(TICK_LEN)} 0")
        middle = frame.y(value) + TICK_SIZE * (ASCENT - LINE_HEIGHT / 2)
        texts.append(svg_text(beside, middle, label, TICK_SIZE, "start"))
    return [
        f'<path d="{" ".join(marks)}" fill="none" stroke="#000000" stroke-width="0.8"/>',
        *texts,
    ]


def svg_text(x: float, y: float, text: str, size: float, anchor: str, color: str = "") -> str:
    fill = f' fill="{color}"' if color else ""
    return (
        f'<text x="{coord(x)}" y="{coord(y)}"{fill} style="font-size: {coord(size)}px; {FONT}; '
        f'text-anchor: {anchor}">{_esc(text)}</text>'
    )


def _span(frame: _Frame, span: Span) -> str:
    a = min(max(frame.x(span.x0), frame.left), frame.right)
    b = min(max(frame.x(span.x1), frame.left), frame.right)
    shade = (
        f'<rect x="{coord(a)}" y="{coord(frame.top)}" width="{coord(max(b - a, 0.0))}" '
        f'height="{coord(frame.bottom - frame.top)}" fill="#999999" fill-opacity="0.12"/>'
    )
    # From the axes' top edge down, clamped into the axes.
    at = min(max(frame.x(span.label_at), frame.left), frame.right)
    label = svg_text(at, frame.top + LEGEND_SIZE * ASCENT, " " + span.label, LEGEND_SIZE, "start")
    return shade + "\n" + label.replace("<text ", '<text xml:space="preserve" ', 1)


def _grid_and_ticks(
    frame: _Frame,
    x_ticks: Sequence[float],
    x_labels: Sequence[str],
    y_ticks: Sequence[float],
    y_labels: Sequence[str],
) -> list[str]:
    grid, marks, texts = [], [], []
    below = frame.bottom + TICK_LEN + TICK_PAD + TICK_SIZE * ASCENT
    for value, label in zip(x_ticks, x_labels, strict=True):
        x = coord(frame.x(value))
        grid.append(f"M {x} {coord(frame.top)} L {x} {coord(frame.bottom)}")
        marks.append(f"M {x} {coord(frame.bottom)} l 0 {coord(TICK_LEN)}")
        texts.append(svg_text(frame.x(value), below, label, TICK_SIZE, "middle"))
    beside = frame.left - TICK_LEN - TICK_PAD
    for value, label in zip(y_ticks, y_labels, strict=True):
        y = coord(frame.y(value))
        grid.append(f"M {coord(frame.left)} {y} L {coord(frame.right)} {y}")
        marks.append(f"M {coord(frame.left)} {y} l {coord(-TICK_LEN)} 0")
        middle = frame.y(value) + TICK_SIZE * (ASCENT - LINE_HEIGHT / 2)
        texts.append(svg_text(beside, middle, label, TICK_SIZE, "end"))
    return [
        f'<path d="{" ".join(grid)}" fill="none" {GRID}/>',
        f'<path d="{" ".join(marks)}" fill="none" stroke="#000000" stroke-width="0.8"/>',
        *texts,
    ]


# matplotlib's legend geometry, in font sizes: the line sample, the gap to the text, the
# space between rows and columns, inside the box, and between the box and the axes.
_HANDLE, _HANDLE_PAD, _ROW_GAP, _COL_GAP, _BORDER, _AXES_PAD = 2.0, 0.8, 0.5, 2.0, 0.4, 0.5


def _legend(
    frame: _Frame,
    lines: Sequence[Line],
    at: str = "best",
    avoid: Sequence[tuple[float, float]] = (),
) -> str:
    size = LEGEND_SIZE
    columns = 1 if len(lines) <= 4 else 2
    rows = math.ceil(len(lines) / columns)
    col_w = [
        size * (_HANDLE + _HANDLE_PAD)
        + max(text_width(line.label, size) for line in lines[c * rows : (c + 1) * rows])
        for c in range(columns)
    ]
    box_w = sum(col_w) + size * (_COL_GAP * (columns - 1) + 2 * _BORDER)
    row_h = size * LINE_HEIGHT
    box_h = rows * row_h + (rows - 1) * size * _ROW_GAP + 2 * size * _BORDER
    if at == "lower right":
        pad = size * _AXES_PAD
        x, y = frame.right - pad - box_w, frame.bottom - pad - box_h
    else:
        x, y = _best_corner(frame, lines, box_w, box_h, avoid)
    out = []
    for i, line in enumerate(lines):
        c, r = divmod(i, rows)
        left = x + size * _BORDER + sum(col_w[:c]) + c * size * _COL_GAP
        middle = y + size * _BORDER + r * (row_h + size * _ROW_GAP) + row_h / 2
        color = line.color or PALETTE[i % len(PALETTE)]
        dash = f' stroke-dasharray="{_dashes(line.dash, line.width)}"' if line.dash else ""
        if line.opacity < 1.0:
            dash += f' stroke-opacity="{coord(line.opacity)}"'
        out.append(
            f'<path d="M {coord(left)} {coord(middle)} l {coord(size * _HANDLE)} 0" '
            f'stroke="{color}" stroke-width="{coord(line.width)}" stroke-linecap="square"{dash}/>'
        )
        baseline = middle + size * (ASCENT - LINE_HEIGHT / 2)
        text_x = left + size * (_HANDLE + _HANDLE_PAD)
        out.append(svg_text(text_x, baseline, line.label, size, "start"))
    return "\n".join(out)


def _best_corner(
    frame: _Frame,
    lines: Sequence[Line],
    box_w: float,
    box_h: float,
    avoid: Sequence[tuple[float, float]] = (),
) -> tuple[float, float]:
    """The legend's top-left corner: of matplotlib's 'best' places (upper right first),
    the one whose box holds the fewest of the drawn points."""
    pad = LEGEND_SIZE * _AXES_PAD
    lo_x, hi_x = frame.left + pad, frame.right - pad - box_w
    lo_y, hi_y = frame.top + pad, frame.bottom - pad - box_h
    mid_x, mid_y = (frame.left + frame.right - box_w) / 2, (frame.top + frame.bottom - box_h) / 2
    places = (
        (hi_x, lo_y),  # upper right
        (lo_x, lo_y),  # upper left
        (lo_x, hi_y),  # lower left
        (hi_x, hi_y),  # lower right
        (hi_x, mid_y),  # right
        (lo_x, mid_y),  # center left
        (mid_x, hi_y),  # lower center
        (mid_x, lo_y),  # upper center
        (mid_x, mid_y),  # center
    )
    points = [
        (frame.x(x), frame.y(y)) for line in lines for x, y in zip(line.xs, line.ys, strict=True)
    ]
    points += avoid
    best, fewest = places[0], None
    for px, py in places:
        inside = sum(px <= x <= px + box_w and py <= y <= py + box_h for x, y in points)
        if fewest is None or inside < fewest:
            best, fewest = (px, py), inside
            if inside == 0:
                break
    return best
