from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

from perfdoctor.render.bar_svg import Bar, Part, stacked_bars

SVG = "{http://www.w3.org/2000/svg}"
PARTS = [Part("data", "#c44e52"), Part("forward", "#4c72b0"), Part("<other>", "#b0b0b0")]


def _draw() -> str:
    return stacked_bars(
        [
            Bar("baseline", [25.0, 10.0, 5.0], " 40.0 ms (run 1)"),
            Bar("b & c", [1.0, 10.0, 0.0], ""),
        ],
        PARTS,
        xlabel="time per step (ms)",
        x_max=54.0,
        height_in=2.5,
        columns=3,
    )


def test_bars_are_stacked_in_order_first_run_on_top():
    root = ET.fromstring(_draw())
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("height") and r.get("x")]
    bars = [r for r in rects if float(r.get("height", "0")) > 10]  # legend patches are small
    first = [r for r in bars if r.get("y") == bars[0].get("y")]
    assert [r.get("fill") for r in first] == ["#c44e52", "#4c72b0", "#b0b0b0"]
    # Each part starts where the one before it ends.
    for a, b in itertools.pairwise(first):
        assert abs(float(a.get("x", 0)) + float(a.get("width", 0)) - float(b.get("x", 0))) < 0.02
    second = [r for r in bars if r.get("y") != bars[0].get("y")]
    assert float(second[0].get("y", 0)) > float(first[0].get("y", 0))
    assert len(second) == 2  # a part of 0 draws nothing


def test_labels_totals_and_legend_are_escaped_text():
    svg = _draw()
    texts = [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert {"baseline", "b & c", " 40.0 ms (run 1)", "data", "forward", "<other>"} <= set(texts)
    assert "<other>" not in svg and "&lt;other&gt;" in svg
    assert "time per step (ms)" in texts and "50" in texts
    assert _draw() == svg
