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
