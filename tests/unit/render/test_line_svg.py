from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from perfdoctor.render.line_svg import Line, Span, line_chart, tick_labels, ticks

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_ticks_are_nice_steps_inside_the_limits():
    assert ticks(-1.35, 28.35, 9, integer=True) == [0, 5, 10, 15, 20, 25]
    assert ticks(0.0, 87.0, 9) == [0, 10, 20, 30, 40, 50, 60, 70, 80]
    assert ticks(0.4, 2.45, 9) == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25]
    # Steps are whole numbers: never a tick at 0.5 on a two-step run.
    assert ticks(-0.05, 1.05, 9, integer=True) == [0, 1]


def test_tick_labels_have_the_decimals_their_step_needs_and_a_real_minus():
    assert tick_labels([0.5, 0.75, 1.0]) == ["0.50", "0.75", "1.00"]
    assert tick_labels([0.0, 2.5, 5.0]) == ["0.0", "2.5", "5.0"]
    assert tick_labels([-10.0, 0.0, 10.0]) == ["−10", "0", "10"]
    assert tick_labels([1e-6, 2e-6]) == ["1e−06", "2e−06"]


def test_a_chart_is_valid_svg_with_its_labels_ticks_and_lines():
    svg = line_chart(
        [Line("baseline", [0, 1, 2, 3], [40.0, 20.0, 21.0, 19.0], "#555555")],
        xlabel="step",
        ylabel="step time (ms)",
        integer_x=True,
        y_bottom=0.0,
    )
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    texts = _texts(svg)
    assert "step" in texts and "step time (ms)" in texts
    assert {"0", "1", "2", "3"} <= set(texts)  # integer x ticks
    assert "0" in texts and "40" in texts  # y from 0 up past the data
    polylines = list(ET.fromstring(svg).iter(f"{SVG}polyline"))
    assert len(polylines) == 1 and polylines[0].get("stroke") == "#555555"
    assert len(polylines[0].get("points", "").split()) == 4
    # One line: no legend.
    assert "baseline" not in texts


def test_points_stay_inside_the_axes_and_the_figure():
    svg = line_chart(
        [
            Line("a", [0, 1, 2], [1e-3, 5.0, -2.0]),
            Line("b", [0, 1, 2], [3.0, 3.0, 3.0]),
        ],
        xlabel="step",
        ylabel="loss",
    )
    root = ET.fromstring(svg)
    width, height = (float(v) for v in root.get("viewBox", "").split()[2:])
    for line in root.iter(f"{SVG}polyline"):
        for point in line.get("points", "").split():
            x, y = (float(v) for v in point.split(","))
            assert 0 < x < width and 0 < y < height


def test_hostile_labels_are_text_and_the_output_is_reproducible():
    lines = [Line("<script>alert(1)</script>", [0, 1], [1.0, 2.0]), Line("b & c", [0, 1], [2, 1])]

    def draw() -> str:
        return line_chart(lines, xlabel="step", ylabel="<b>", span=Span(-0.5, 0.5, "warm-up", 0))

    svg = draw()
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "&amp;" in svg
    assert "<b>" not in svg
    assert draw() == svg
    ET.fromstring(svg)  # well-formed


def test_the_legend_avoids_the_data():
    """Lines high on the right: the legend moves off the upper right corner."""
    xs = [float(i) for i in range(20)]
    high_right = [Line("rising", xs, xs), Line("flat", xs, [10.0] * 20)]
    svg = line_chart(high_right, xlabel="step", ylabel="y")
    label = next(t for t in ET.fromstring(svg).iter(f"{SVG}text") if t.text == "rising")
    width = float(ET.fromstring(svg).get("viewBox", "").split()[2])
    assert float(label.get("x", "0")) < width / 2


def test_the_warm_up_span_is_shaded_and_labelled():
    svg = line_chart(
        [Line("baseline", [0, 1, 2, 3, 4], [9.0, 8.0, 2.0, 2.0, 2.0])],
        xlabel="step",
        ylabel="ms",
        span=Span(-0.5, 1.5, "warm-up", 0.0),
    )
    assert re.search(r'<rect [^>]*fill="#999999" fill-opacity="0.12"', svg)
    assert " warm-up" in _texts(svg)
