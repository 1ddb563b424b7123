"""A small SVG plotter for the report's charts: line charts (an optional right-hand axis, a
shaded span, marked points) and horizontal stacked bars.

Why not matplotlib: importing it and laying out five figures cost about 0.75 s of CPU per
report (more than half of a `perfdoctor report` on a small run, and a quarter of the 3 s
budget for a 200 MB trace), to draw a few lines and bars. This writes the same charts as
plain SVG markup in a few milliseconds. Every piece of text goes through `esc` (XML
escaping), so a variant label such as `<script>` stays text; the output is deterministic (same
input, same bytes) and uses only plain shape and text elements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

FONT = "font-family:sans-serif"
_TICK_PX = 11
_LABEL_PX = 12
_LEGEND_PX = 11
_CHAR_PX = 6.2  # average glyph width at 11 px, for sizing margins and legend boxes
_AXIS_COLOR = "#444444"
_GRID = 'stroke="#b0b0b0" stroke-opacity="0.3" stroke-width="1"'


def esc(text: str) -> str:
    return escape(text, quote=True)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value = first + len(ticks) * step
    return ticks


def fmt_tick(value: float) -> str:
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    text = f"{value:.4g}"
    return text


def _num(value: float) -> str:
    return f"{value:.1f}"


def _text(
    x: float, y: float, text: str, size: int = _TICK_PX, anchor: str = "start", extra: str = ""
) -> str:
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}" '
        f'style="{FONT}"{extra}>{esc(text)}</text>'
    )


@dataclass
class _Line:
    xs: Sequence[float]
    ys: Sequence[float]
    color: str
    width: float
    dashed: bool
    label: str | None
    right: bool


@dataclass
class _Mark:
    x: float
    y: float
    color: str
    note: str


@dataclass
class LinePlot:
    """Lines over a shared x axis; `right=True` lines use a second y axis on the right."""

    key: str = "plot"  # unique per chart: the clip path's id in a page holding several
    width: int = 580
    height: int = 300
    xlabel: str = ""
    ylabel: str = ""
    ylabel_right: str = ""
    y_bottom: float | None = None
    y_top: float | None = None
    y_right_bottom: float | None = None
    legend_loc: str = "best"  # "best" (the emptiest corner), "upper right", "lower right", ...
    lines: list[_Line] = field(default_factory=list)
    marks: list[_Mark] = field(default_factory=list)
    span: tuple[float, float, str] | None = None  # x0, x1, label

    def line(
        self,
        xs: Sequence[float],
        ys: Sequence[float],
        color: str,
        *,
        width: float = 1.2,
        dashed: bool = False,
        label: str | None = None,
        right: bool = False,
    ) -> None:
        self.lines.append(_Line(xs, ys, color, width, dashed, label, right))

    def mark(self, x: float, y: float, color: str, note: str) -> None:
        """A downward triangle at (x, y) with a note beside it (the memory peak)."""
        self.marks.append(_Mark(x, y, color, note))

    def shade(self, x0: float, x1: float, label: str) -> None:
        self.span = (x0, x1, label)

    def _range(self, right: bool) -> tuple[float, float]:
        ys = [y for ln in self.lines if ln.right == right for y in ln.ys]
        ys += [m.y for m in self.marks] if not right else []
        lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
        bottom = self.y_right_bottom if right else self.y_bottom
        top = None if right else self.y_top
        if bottom is not None:
            lo = bottom
        if top is not None:
            hi = top
        elif hi > lo:
            hi += (hi - lo) * 0.05
        else:
            hi = lo + (abs(lo) or 1.0)
        return lo, hi

    def svg(self) -> str:
        has_right = any(ln.right for ln in self.lines)
        xs = [x for ln in self.lines for x in ln.xs]
        x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
        if self.span is not None:
            x0 = min(x0, self.span[0])
        if x1 <= x0:
            x0, x1 = x0 - 0.5, x1 + 0.5
        pad = (x1 - x0) * 0.02
        x0, x1 = x0 - pad, x1 + pad
        y0, y1 = self._range(False)
        yticks = nice_ticks(y0, y1)
        rticks: list[float] = []
        r0, r1 = 0.0, 1.0
        if has_right:
            r0, r1 = self._range(True)
            rticks = nice_ticks(r0, r1)
        left = 14 + _LABEL_PX + 6 + _CHAR_PX * max((len(fmt_tick(t)) for t in yticks), default=1)
        right = 14 + (
            _LABEL_PX + 6 + _CHAR_PX * max((len(fmt_tick(t)) for t in rticks), default=1)
            if has_right
            else 0
        )
        top, bottom = 12, 46
        pw, ph = self.width - left - right, self.height - top - bottom

        def px(x: float) -> float:
            return left + (x - x0) / (x1 - x0) * pw

        def py(y: float, lo: float = y0, hi: float = y1) -> float:
            return top + ph - (y - lo) / (hi - lo) * ph

        out = [_open(self.width, self.height)]
        clip_id = f"clip-{esc(self.key)}"
        clip = (
            f'<defs><clipPath id="{clip_id}"><rect x="{_num(left)}" y="{top}" width="{_num(pw)}" '
        )
        clip += f'height="{ph}"/></clipPath></defs>'
        out.append(clip)
        if self.span is not None:
            s0, s1 = max(px(self.span[0]), left), min(px(self.span[1]), left + pw)
            out.append(
                f'<rect x="{_num(s0)}" y="{top}" width="{_num(max(s1 - s0, 0))}" height="{ph}" '
                'fill="#999999" fill-opacity="0.12"/>'
            )
            out.append(_text(s0 + 3, top + _TICK_PX, self.span[2]))
        xticks = [t for t in nice_ticks(x0, x1, 6) if x0 <= t <= x1]
        for t in xticks:
            x = px(t)
            out.append(f'<line x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + ph}" {_GRID}/>')
            out.append(_text(x, top + ph + 4 + _TICK_PX, fmt_tick(t), anchor="middle"))
        for t in yticks:
            if y0 <= t <= y1:
                y = py(t)
                out.append(
                    f'<line x1="{_num(left)}" y1="{_num(y)}" x2="{_num(left + pw)}" '
                    f'y2="{_num(y)}" {_GRID}/>'
                )
                out.append(_text(left - 4, y + 4, fmt_tick(t), anchor="end"))
        for t in rticks:
            if r0 <= t <= r1:
                out.append(_text(left + pw + 4, py(t, r0, r1) + 4, fmt_tick(t)))
        out.append(_axes_frame(left, top, pw, ph, right_side=has_right))
        for ln in self.lines:
            lo, hi = (r0, r1) if ln.right else (y0, y1)
            pts = " ".join(
                f"{_num(px(x))},{_num(py(y, lo, hi))}" for x, y in zip(ln.xs, ln.ys, strict=True)
            )
            dash = ' stroke-dasharray="5,3"' if ln.dashed else ""
            out.append(
                f'<polyline points="{pts}" fill="none" stroke="{ln.color}" '
                f'stroke-width="{ln.width}"{dash} stroke-linejoin="round" '
                f'clip-path="url(#{clip_id})"/>'
            )
        for m in self.marks:
            x, y = px(m.x), py(m.y)
            out.append(
                f'<path d="M{_num(x - 5)},{_num(y - 8)} L{_num(x + 5)},{_num(y - 8)} '
                f'L{_num(x)},{_num(y)} Z" fill="{m.color}"/>'
            )
            anchor = "end" if x > left + pw * 0.7 else "start"
            dx = -6 if anchor == "end" else 6
            out.append(_text(x + dx, y - 10, m.note, anchor=anchor))
        out.append(_text(left + pw / 2, self.height - 8, self.xlabel, _LABEL_PX, "middle"))
        out.append(_vertical(12 + _LABEL_PX / 2, top + ph / 2, self.ylabel))
        if has_right:
            out.append(_vertical(self.width - 10, top + ph / 2, self.ylabel_right))
        labelled = [(ln.label, ln.color, ln.dashed) for ln in self.lines if ln.label]
        if len(labelled) > 1:
            points = [
                (px(x), py(y, *((r0, r1) if ln.right else (y0, y1))))
                for ln in self.lines
                for x, y in zip(
                    ln.xs[:: max(len(ln.xs) // 200, 1)],
                    ln.ys[:: max(len(ln.ys) // 200, 1)],
                    strict=True,
                )
            ]
            # A mark's note reaches about 100 px beside it.
            points += [(px(m.x) + dx, py(m.y) - 10) for m in self.marks for dx in (-100, 0, 100)]
            box = _legend_box(labelled, left, top, pw, ph, self.legend_loc, points)
            out.append(_legend(labelled, box))
        out.append("</svg>")
        return "\n".join(out)


def _open(width: float, height: float) -> str:
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'version="1.1" role="img">'
    )


def _axes_frame(left: float, top: float, pw: float, ph: float, right_side: bool) -> str:
    parts = [
        f'<line x1="{_num(left)}" y1="{top}" x2="{_num(left)}" y2="{_num(top + ph)}" '
        f'stroke="{_AXIS_COLOR}"/>',
        f'<line x1="{_num(left)}" y1="{_num(top + ph)}" x2="{_num(left + pw)}" '
        f'y2="{_num(top + ph)}" stroke="{_AXIS_COLOR}"/>',
    ]
    if right_side:
        parts.append(
            f'<line x1="{_num(left + pw)}" y1="{top}" x2="{_num(left + pw)}" '
            f'y2="{_num(top + ph)}" stroke="{_AXIS_COLOR}"/>'
        )
    return "".join(parts)


def _vertical(x: float, y: float, text: str) -> str:
    return _text(x, y, text, _LABEL_PX, "middle", f' transform="rotate(-90 {_num(x)} {_num(y)})"')


def _legend_size(items: list[tuple[str, str, bool]]) -> tuple[float, float]:
    return 30 + _CHAR_PX * max(len(label) for label, _, _ in items), (_LEGEND_PX + 5) * len(
        items
    ) + 6


def _legend_box(
    items: list[tuple[str, str, bool]],
    left: float,
    top: float,
    pw: float,
    ph: float,
    loc: str,
    points: list[tuple[float, float]],
) -> tuple[float, float]:
    """Top-left corner of the legend: the named corner, or with "best" the corner covering
    the fewest plotted points (ties: upper right, upper left, lower right, lower left)."""
    width, height = _legend_size(items)
    corners = {
        "upper right": (left + pw - width - 6, top + 6),
        "upper left": (left + 6, top + 6),
        "lower right": (left + pw - width - 6, top + ph - height - 6),
        "lower left": (left + 6, top + ph - height - 6),
    }
    if loc in corners:
        return corners[loc]

    def covered(corner: tuple[float, float]) -> int:
        x, y = corner
        return sum(x <= px <= x + width and y <= py <= y + height for px, py in points)

    return min(corners.values(), key=covered)


def _legend(items: list[tuple[str, str, bool]], corner: tuple[float, float]) -> str:
    row = _LEGEND_PX + 5
    width, height = _legend_size(items)
    x, y = corner
    parts = [
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(width)}" height="{_num(height)}" '
        'fill="#ffffff" fill-opacity="0.8"/>'
    ]
    for i, (label, color, dashed) in enumerate(items):
        cy = y + 4 + row * i + row / 2
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        parts.append(
            f'<line x1="{_num(x + 4)}" y1="{_num(cy)}" x2="{_num(x + 22)}" y2="{_num(cy)}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        parts.append(_text(x + 26, cy + 4, label, _LEGEND_PX))
    return "".join(parts)


@dataclass
class BarPlot:
    """Horizontal stacked bars, one row per label, a total at the end of each bar."""

    rows: list[str]
    parts: list[tuple[str, str, list[float]]]  # (part label, colour, width per row)
    totals: list[str]  # text written after each bar
    xlabel: str = ""
    width: int = 580

    def svg(self) -> str:
        n = len(self.rows)
        bar_h, gap = 22, 12
        left = 14 + _CHAR_PX * max((len(r) for r in self.rows), default=1)
        legend_rows = math.ceil(len(self.parts) / 6) if self.parts else 0
        top = 10
        ph = n * (bar_h + gap) + gap
        height = int(top + ph + 40 + legend_rows * 18 + 8)
        sums = [sum(w[i] for _, _, w in self.parts) for i in range(n)]
        hi = max(sums, default=0.0)
        hi = hi * 1.18 if hi > 0 else 1.0
        pw = self.width - left - 16

        def px(x: float) -> float:
            return left + x / hi * pw

        out = [_open(self.width, height)]
        for t in nice_ticks(0.0, hi, 6):
            if t <= hi:
                x = px(t)
                out.append(
                    f'<line x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + ph}" {_GRID}/>'
                )
                out.append(_text(x, top + ph + 4 + _TICK_PX, fmt_tick(t), anchor="middle"))
        for i, label in enumerate(self.rows):
            y = top + gap + i * (bar_h + gap)
            acc = 0.0
            for _, color, widths in self.parts:
                w = widths[i]
                if w > 0:
                    out.append(
                        f'<rect x="{_num(px(acc))}" y="{y}" width="{_num(px(acc + w) - px(acc))}"'
                        f' height="{bar_h}" fill="{color}"/>'
                    )
                acc += w
            out.append(_text(left - 4, y + bar_h / 2 + 4, label, anchor="end"))
            out.append(_text(px(acc) + 3, y + bar_h / 2 + 4, self.totals[i], _LEGEND_PX))
        out.append(_axes_frame(left, top, pw, ph, right_side=False))
        out.append(_text(left + pw / 2, top + ph + 34, self.xlabel, _LABEL_PX, "middle"))
        per_row = 6
        cell = pw / min(max(len(self.parts), 1), per_row)
        for k, (label, color, _) in enumerate(self.parts):
            lx = left + (k % per_row) * cell
            ly = top + ph + 48 + (k // per_row) * 18
            out.append(
                f'<rect x="{_num(lx)}" y="{_num(ly)}" width="12" height="10" fill="{color}"/>'
            )
            out.append(_text(lx + 16, ly + 9, label, _LEGEND_PX))
        out.append("</svg>")
        return "\n".join(out)
