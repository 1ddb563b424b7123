from __future__ import annotations

import xml.etree.ElementTree as ET

from perfdoctor.render.loglog_svg import decade_ticks, roofline_chart

SVG = "{http://www.w3.org/2000/svg}"


def test_decade_ticks_and_their_fill_in_on_a_narrow_range():
    assert decade_ticks(0.9, 3.1) == [10.0, 100.0, 1000.0]
    # Less than two powers of ten inside: 2x and 5x fill in.
    assert decade_ticks(1.2, 1.9) == [20.0, 50.0]


def test_points_roof_and_labels():
    svg = roofline_chart(
        [(20.0, 0.05, "mm <64x64>"), (600.0, 170.0, "mm 1024x2048")],
        roof=[(10.0, 33.5), (295.4, 989.5), (1200.0, 989.5)],
        peak=989.5,
        peak_label="dense peak 989.5 TFLOP/s",
        peak_at=10.0,
        xlabel="arithmetic intensity",
        ylabel="achieved TFLOP/s",
    )
    root = ET.fromstring(svg)
    width, height = (float(v) for v in root.get("viewBox", "").split()[2:])
    circles = list(root.iter(f"{SVG}circle"))
    assert len(circles) == 2
    assert all(
        0 < float(c.get("cx", 0)) < width and 0 < float(c.get("cy", 0)) < height for c in circles
    )
    # Log scale: 0.05 is far below 170.
    assert float(circles[0].get("cy", 0)) > float(circles[1].get("cy", 0)) + 100
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert {"10", "100", "1,000", "0.1", "dense peak 989.5 TFLOP/s", "mm <64x64>"} <= set(texts)
    assert "<64x64>" not in svg  # escaped
    # The roof: one dashed path.
    assert len([p for p in root.iter(f"{SVG}path") if p.get("stroke-dasharray")]) == 1


def test_labels_of_ops_at_one_point_do_not_print_over_each_other():
    svg = roofline_chart(
        [(0.4, 1e-5, "addmm [[32, 4]]"), (0.4, 1e-5, "mm [[4, 32]]"), (50.0, 0.01, "mm 256")],
        xlabel="arithmetic intensity",
        ylabel="achieved TFLOP/s",
    )
    root = ET.fromstring(svg)
    at = {
        t.text: (float(t.get("x", 0)), float(t.get("y", 0)))
        for t in root.iter(f"{SVG}text")
        if t.text and ("mm" in t.text)
    }
    (x1, y1), (x2, y2) = at["addmm [[32, 4]]"], at["mm [[4, 32]]"]
    assert x1 == x2 and abs(y1 - y2) >= 6.0  # a line apart (6 pt labels)
    assert at["mm 256"][1] < y1  # a label with room keeps its place at its point


def test_points_a_few_percent_apart_stay_together_on_an_axis_with_ticks():
    """Three ops at 0.386-0.394 FLOP/byte: not spread over the width, and the axis has a
    tick to read them by."""
    svg = roofline_chart(
        [(0.386, 5e-6, "addmm"), (0.394, 2e-5, "mm a"), (0.390, 2.3e-5, "mm b")],
        xlabel="arithmetic intensity",
        ylabel="achieved TFLOP/s",
    )
    root = ET.fromstring(svg)
    width = float(root.get("viewBox", "").split()[2])
    xs = [float(c.get("cx", 0)) for c in root.iter(f"{SVG}circle")]
    assert max(xs) - min(xs) < width * 0.05
    ticks = {t.text for t in root.iter(f"{SVG}text")}
    assert ticks & {"0.2", "0.5", "1", "0.1"}
