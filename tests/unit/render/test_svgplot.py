from __future__ import annotations

import re

import pytest

from perfdoctor.render.svgplot import BarPlot, LinePlot, fmt_tick, nice_ticks


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.0, 105.0, [0, 25, 50, 75, 100]),
        (0.0, 1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (3.0, 3.0, [3.0, 4.0, 5.0, 6.0]),
    ],
)
def test_nice_ticks_are_round_and_cover_the_range(lo: float, hi: float, expected: list) -> None:
    assert nice_ticks(lo, hi) == pytest.approx(expected)


def test_tick_labels_are_short() -> None:
    assert [fmt_tick(v) for v in (0.0, 20.0, 0.25, 1234567.0, 1e-5)] == [
        "0",
        "20",
        "0.25",
        "1234567",
        "1e-05",
    ]


def _points(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(map(float, p.split(","))) for p in m.split()]  # type: ignore[misc]
        for m in re.findall(r'<polyline points="([^"]+)"', svg)
    ]


def test_lines_map_data_onto_the_plot_area_and_escape_text() -> None:
    plot = LinePlot(key="k", xlabel="step <x>", ylabel="ms & more", y_bottom=0.0)
    plot.line([0.0, 10.0], [0.0, 50.0], "#111111", label="<script>alert(1)</script>")
    plot.line([0.0, 10.0], [50.0, 0.0], "#222222", label="other")
    svg = plot.svg()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "step &lt;x&gt;" in svg and "ms &amp; more" in svg
    first, second = _points(svg)
    # Rising line: ends higher (smaller y) and further right than it starts.
    assert first[1][0] > first[0][0] and first[1][1] < first[0][1]
    assert second[0][1] == pytest.approx(first[1][1])
    assert plot.svg() == svg  # deterministic


def test_legend_avoids_the_data() -> None:
    plot = LinePlot(key="k")
    xs = [float(i) for i in range(100)]
    plot.line(xs, [100.0 - x for x in xs], "#111111", label="falling")  # busy upper left
    plot.line(xs, [100.0 - x for x in xs], "#222222", label="again")
    svg = plot.svg()
    rect = re.search(
        r'<rect x="([\d.]+)" y="([\d.]+)" width="[\d.]+" height="[\d.]+" '
        r'fill="#ffffff"',
        svg,
    )
    assert rect is not None
    x, y = float(rect.group(1)), float(rect.group(2))
    assert x > 200 and y < 50  # upper right: the falling line is low there


def test_marks_and_right_axis_and_shading() -> None:
    plot = LinePlot(key="m", ylabel_right="power (W, dashed)", y_right_bottom=0.0)
    plot.line([0.0, 1.0], [1.0, 2.0], "#111111", label="a")
    plot.line([0.0, 1.0], [300.0, 310.0], "#111111", dashed=True, right=True, label="a power")
    plot.mark(1.0, 2.0, "#111111", "peak 2.0 GiB")
    plot.shade(-0.5, 0.5, " warm-up")
    svg = plot.svg()
    assert "peak 2.0 GiB" in svg and "power (W, dashed)" in svg and "warm-up" in svg
    assert 'stroke-dasharray="5,3"' in svg and 'clip-path="url(#clip-m)"' in svg


def test_stacked_bars_widths_add_up() -> None:
    plot = BarPlot(
        rows=["baseline", "fast"],
        parts=[("data", "#c44e52", [30.0, 1.0]), ("forward", "#4c72b0", [10.0, 9.0])],
        totals=[" 40 ms", " 10 ms"],
        xlabel="time per step (ms)",
    )
    svg = plot.svg()
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)"', svg)]
    assert widths[0] / widths[1] == pytest.approx(3.0, rel=0.02)  # 30 ms vs 10 ms
    assert (widths[0] + widths[1]) / (widths[2] + widths[3]) == pytest.approx(4.0, rel=0.02)
    assert " 40 ms" in svg and "forward" in svg
