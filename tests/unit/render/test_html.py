from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from perfdoctor.render.html import render_html

from .fixtures import cpu_report, empty_series_report, hostile_report, long_report

MAX_HTML_BYTES = 3 * 1024 * 1024
CHART_IDS = ("step_time", "breakdown", "utilization", "memory", "loss")


class _Tags(HTMLParser):
    """Every element and attribute as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _parse(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    parser.close()
    return parser.tags


def _figure(text: str, key: str) -> str:
    match = re.search(rf'<figure id="chart-{key}">(.*?)</figure>', text, re.DOTALL)
    assert match, key
    return match.group(1)


def test_smoke_every_section_and_chart():
    text = render_html(cpu_report())
    assert text.startswith("<!DOCTYPE html>")
    for heading in ("Diagnosis", "Baseline step", "Findings", "Recommendations", "Variants"):
        assert f"<h2>{heading}</h2>" in text
    assert "<details><summary>3 rule(s) skipped" in text
    for key in CHART_IDS:
        assert "<svg" in _figure(text, key), key
    assert "2.43x ± 0.06" in text
    assert "sample_models/image_cnn.py:48 (main)" in text
    assert "3.11.7" in text  # environment: versions


def test_self_contained_no_network_reference():
    text = render_html(cpu_report())
    tags = _parse(text)
    names = {tag for tag, _ in tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "base"}
    for _, attrs in tags:
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "action", "poster", "srcset"):
                assert value is not None and value.startswith("#"), (name, value)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert not re.search(r"@import|@font-face", text)
    csp = [a for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")


def test_hostile_text_is_escaped_everywhere():
    text = render_html(hostile_report())
    tags = _parse(text)
    assert not [t for t, _ in tags if t in ("script", "img")]
    for tag, attrs in tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # The hostile legend and tick labels are escaped in the SVG too (matplotlib draws the
    # breakdown, render/line_svg.py the step time).
    assert "&lt;script&gt;" in _figure(text, "breakdown")
    assert "&lt;script&gt;" in _figure(text, "step_time")


def test_size_stays_small_for_long_runs():
    text = render_html(long_report(steps=10_000))
    assert len(text.encode()) < MAX_HTML_BYTES
    for key in CHART_IDS:
        assert "<svg" in _figure(text, key)


@pytest.mark.parametrize("key", CHART_IDS)
def test_missing_data_is_said_not_drawn(key):
    text = render_html(empty_series_report())
    figure = _figure(text, key)
    if key == "breakdown":  # still drawn from the baseline summary's breakdown
        assert "<svg" in figure
    else:
        assert "<svg" not in figure
        assert "not measured:" in figure
