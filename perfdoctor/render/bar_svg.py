"""The step breakdown (one stacked horizontal bar per run) written as SVG directly.

A diagnosed trace with DataLoader spans draws this chart and no other matplotlib one, so
drawing it by hand spares `perfdoctor diagnose` matplotlib's import (0.75 s of CPU, issue
30). Same look as the matplotlib charts beside it and the same primitives as line_svg.py:
bars 0.6 of a row thick, the first run on top, each bar's total written after it, a grid
on the x axis only, the parts' legend in one band under the axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfdoctor.render.line_svg import (
    ASCENT,
    DPI,
    GRID,
    LABEL_PAD,
    LEGEND_SIZE,
    LINE_HEIGHT,
    PAD,
    TICK_LEN,
    TICK_PAD,
    TICK_SIZE,
    WIDTH_IN,
    coord,
    spines,
    svg_text,
    text_width,
    tick_labels,
    ticks,
)

BAR_THICKNESS = 0.6  # of a row
_Y_MARGIN = 0.05  # of the bars' extent, above the first and below the last
_LEGEND_PATCH = (2.0, 0.7)  # width, height in legend font sizes
_LEGEND_GAP = 0.8  # between the patch and its text, and (x2) between entries
_LEGEND_TOP_GAP = 6.0  # points between the x axis label and the legend


@dataclass(frozen=True)
class Part:
    label: str
    color: str


@dataclass(frozen=True)
class Bar:
    label: str  # the row's tick label
    values: Sequence[float]  # one per part, in the parts' order (0 where absent)
    note: str  # written after the bar's end


def stacked_bars(
    bars: Sequence[Bar],
    parts: Sequence[Part],
    *,
    xlabel: str,
    x_max: float,
    height_in: float,
    columns: int,
) -> str:
    width, height = WIDTH_IN * DPI, height_in * DPI
    line_h = TICK_SIZE * LINE_HEIGHT
    legend_rows = math.ceil(len(parts) / max(columns, 1))
    legend_h = legend_rows * LEGEND_SIZE * LINE_HEIGHT * 1.5
    bottom = height - (
        PAD + legend_h + _LEGEND_TOP_GAP + line_h + LABEL_PAD + line_h + TICK_PAD + TICK_LEN
    )
    top = PAD
    widest = max((text_width(b.label, TICK_SIZE) for b in bars), default=0.0)
    left = PAD + widest + TICK_PAD + TICK_LEN
    right = width - PAD
    x_ticks = ticks(0.0, x_max, int((right - left) // (TICK_SIZE * 3)))
    x_labels = tick_labels(x_ticks)
    # Rows 0..n-1 from the top; the bars' extent plus a margin on both sides.
    extent = len(bars) - 1 + BAR_THICKNESS
    y_lo = -BAR_THICKNESS / 2 - _Y_MARGIN * extent
    y_hi = len(bars) - 1 + BAR_THICKNESS / 2 + _Y_MARGIN * extent

    def x(value: float) -> float:
        return left + value / x_max * (right - left)

    def y(row: float) -> float:
        return top + (row - y_lo) / (y_hi - y_lo) * (bottom - top)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{coord(width)}pt" '
        f'height="{coord(height)}pt" viewBox="0 0 {coord(width)} {coord(height)}" version="1.1">',
        f'<rect width="{coord(width)}" height="{coord(height)}" fill="#ffffff"/>',
    ]
    grid = " ".join(
        f"M {coord(x(v))} {coord(top)} L {coord(x(v))} {coord(bottom)}" for v in x_ticks
    )
    out.append(f'<path d="{grid}" fill="none" {GRID}/>')
    thick = BAR_THICKNESS / (y_hi - y_lo) * (bottom - top)
    for row, bar in enumerate(bars):
        start = 0.0
        for part, value in zip(parts, bar.values, strict=True):
            if value > 0:
                out.append(
                    f'<rect x="{coord(x(start))}" y="{coord(y(row) - thick / 2)}" '
                    f'width="{coord(x(start + value) - x(start))}" height="{coord(thick)}" '
                    f'fill="{part.color}"/>'
                )
            start += max(value, 0.0)
        middle = y(row) + LEGEND_SIZE * (ASCENT - LINE_HEIGHT / 2)
        out.append(svg_text(x(start), middle, bar.note, LEGEND_SIZE, "start"))
    marks = [f"M {coord(x(v))} {coord(bottom)} l 0 {coord(TICK_LEN)}" for v in x_ticks]
    marks += [f"M {coord(left)} {coord(y(r))} l {coord(-TICK_LEN)} 0" for r in range(len(bars))]
    out.append(f'<path d="{" ".join(marks)}" fill="none" stroke="#000000" stroke-width="0.8"/>')
    out.append(spines(left, top, right, bottom))
    below = bottom + TICK_LEN + TICK_PAD + TICK_SIZE * ASCENT
    out += [
        svg_text(x(v), below, t, TICK_SIZE, "middle")
        for v, t in zip(x_ticks, x_labels, strict=True)
    ]
    beside = left - TICK_LEN - TICK_PAD
    for row, bar in enumerate(bars):
        middle = y(row) + TICK_SIZE * (ASCENT - LINE_HEIGHT / 2)
        out.append(svg_text(beside, middle, bar.label, TICK_SIZE, "end"))
    label_y = bottom + TICK_LEN + TICK_PAD + line_h + LABEL_PAD + TICK_SIZE * ASCENT
    out.append(svg_text((left + right) / 2, label_y, xlabel, TICK_SIZE, "middle"))
    out += _legend(parts, columns, (left + right) / 2, label_y + _LEGEND_TOP_GAP + line_h / 2)
    out.append("</svg>")
    return "\n".join(out)


def _legend(parts: Sequence[Part], columns: int, centre: float, top: float) -> list[str]:
    """The parts in rows of `columns` entries, each row centred under the axes."""
    size = LEGEND_SIZE
    patch_w, patch_h = (v * size for v in _LEGEND_PATCH)
    out = []
    for start in range(0, len(parts), max(columns, 1)):
        row = parts[start : start + columns]
        widths = [patch_w + _LEGEND_GAP * size + text_width(p.label, size) for p in row]
        total = sum(widths) + 2 * _LEGEND_GAP * size * (len(row) - 1)
        left = centre - total / 2
        middle = top + (start // max(columns, 1)) * size * LINE_HEIGHT * 1.5 + size * 0.6
        for part, w in zip(row, widths, strict=True):
            out.append(
                f'<rect x="{coord(left)}" y="{coord(middle - patch_h / 2)}" '
                f'width="{coord(patch_w)}" height="{coord(patch_h)}" fill="{part.color}"/>'
            )
            baseline = middle + size * (ASCENT - LINE_HEIGHT / 2)
            text_x = left + patch_w + _LEGEND_GAP * size
            out.append(svg_text(text_x, baseline, part.label, size, "start"))
            left += w + 2 * _LEGEND_GAP * size
    return out
