"""report.html in a real browser: headless Chromium draws the charts and fetches nothing.

Three checks: the DOM Chromium built holds the five chart SVGs; a screenshot (saved under
test-artifacts/ for people to look at) shows the charts' colours; and Chromium's own network
log holds no http(s) request made by the page. Chromium makes background requests of its
own (component updates, time sync) even with background networking disabled; those carry
no page initiator, so the check counts only requests a document initiated, and a control
page that does load a remote image proves the check can see one.

The three checks read one Chromium run of the report (--dump-dom, --screenshot and
--log-net-log together), and the report is rendered once per module: each Chromium start
and each rendering of the charts costs about a second.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from load_limits import scaled

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from render.fixtures import cpu_report

from perfdoctor.render.html import render_html

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHART_IDS = ("step_time", "breakdown", "utilization", "memory", "loss")
BROWSER_TIMEOUT_S = 120
# Colours the charts paint with (render/charts.py): the data share and forward bars.
CHART_COLOURS = ((0xC4, 0x4E, 0x52), (0x4C, 0x72, 0xB0))


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


def _run_browser(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=scaled(BROWSER_TIMEOUT_S), check=False
    )


def _page_requests(net_log: Path) -> list[str]:
    """http(s) URLs that a document asked for, from Chromium's --log-net-log JSON."""
    data = json.loads(net_log.read_text())
    names = {value: key for key, value in data["constants"]["logEventTypes"].items()}
    urls = []
    for event in data["events"]:
        if names.get(event.get("type")) != "URL_REQUEST_START_JOB":
            continue
        params = event.get("params", {})
        url = params.get("url", "")
        if url.startswith(("http://", "https://")) and params.get("initiator") != "not an origin":
            urls.append(url)
    return urls


@functools.cache
def report_html() -> str:
    return render_html(cpu_report())


@dataclass(frozen=True)
class ReportInChromium:
    result: subprocess.CompletedProcess[str]  # stdout: the DOM
    shot: Path
    net_log: Path


@pytest.fixture(scope="module")
def report_in_chromium(tmp_path_factory: pytest.TempPathFactory) -> ReportInChromium:
    ARTIFACTS.mkdir(exist_ok=True)
    page = ARTIFACTS / "report.html"
    page.write_text(report_html(), encoding="utf-8")
    shot = ARTIFACTS / "report-html.png"
    shot.unlink(missing_ok=True)
    work = tmp_path_factory.mktemp("chromium")
    net_log = work / "netlog.json"
    result = _run_browser(
        page,
        work / "profile",
        "--dump-dom",
        f"--screenshot={shot}",
        "--window-size=1280,4000",
        f"--log-net-log={net_log}",
    )
    return ReportInChromium(result, shot, net_log)


def test_charts_are_in_the_dom(report_in_chromium: ReportInChromium):
    result = report_in_chromium.result
    dom = result.stdout
    assert "<h2>Charts</h2>" in dom, result.stderr[-2000:]
    for key in CHART_IDS:
        start = dom.index(f'id="chart-{key}"')
        figure = dom[start : dom.index("</figure>", start)]
        assert "<svg" in figure and "<path" in figure, key


def test_screenshot_shows_the_charts(report_in_chromium: ReportInChromium):
    import numpy as np
    from PIL import Image

    shot, result = report_in_chromium.shot, report_in_chromium.result
    assert shot.is_file(), result.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1280, 4000)
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16).reshape(-1, 3)
    for colour in CHART_COLOURS:
        close = int((np.abs(pixels - np.array(colour)) <= 6).all(axis=1).sum())
        assert close > 500, f"chart colour {colour} barely on screen ({close} px)"


def test_nothing_is_fetched_from_the_network(report_in_chromium: ReportInChromium):
    net_log = report_in_chromium.net_log
    assert net_log.is_file()
    assert _page_requests(net_log) == []


def test_network_check_sees_a_page_that_does_fetch(tmp_path: Path):
    control = tmp_path / "control.html"
    # Port 9 (discard) on loopback: the request is made and fails, nothing leaves the machine.
    control.write_text('<!DOCTYPE html><img src="http://127.0.0.1:9/pixel.png">')
    net_log = tmp_path / "netlog.json"
    _run_browser(control, tmp_path / "profile", f"--log-net-log={net_log}", "--dump-dom")
    assert _page_requests(net_log) == ["http://127.0.0.1:9/pixel.png"]


# Marks every table cell whose text Chromium broke inside a word (a text node laid out on
# more than one line while holding no space): "baselin|e", "dataloa|der-workers".
_BROKEN_WORDS_PROBE = """<script>
window.addEventListener("load", () => {
  const broken = [];
  for (const cell of document.querySelectorAll("td, th")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.split(/\\s+/)) {
        if (word.length < 2 || word.includes("/")) continue;  // paths must wrap somewhere
        const start = node.textContent.indexOf(word);
        const range = document.createRange();
        range.setStart(node, start);
        range.setEnd(node, start + word.length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(word);
      }
    }
  }
  const out = document.createElement("pre");
  out.id = "broken-words";
  out.textContent = JSON.stringify(broken);
  document.body.appendChild(out);
});
</script>"""


def _broken_words_page(directory: Path) -> Path:
    page = directory / "report-probe.html"
    # The report's Content-Security-Policy forbids scripts: this copy drops it for the probe.
    csp = r'<meta http-equiv="Content-Security-Policy"[^>]*>'
    html = re.sub(csp, "", report_html())
    page.write_text(html.replace("</body>", _BROKEN_WORDS_PROBE + "</body>"), encoding="utf-8")
    return page


WIDTHS = (1280, 760)


@pytest.fixture(scope="module")
def broken_words(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str | None]:
    """The probe's list at each width, from one Chromium (driven over its pipe, cdp_pipe.py)
    that lays the page out at one width, then the other: a Chromium start per width cost
    about 2 s of CPU at load 25. None where the probe never wrote its list."""
    from cdp_pipe import Chromium

    _chromium()  # skips without a browser, as the other checks do
    work = tmp_path_factory.mktemp("widths")
    page = _broken_words_page(work)
    found: dict[int, str | None] = {}
    with Chromium(work / "profile", width=WIDTHS[0], height=3000) as browser:
        for width in WIDTHS:
            browser.open("about:blank")
            browser.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 3000, "deviceScaleFactor": 1, "mobile": False},
                page=True,
            )
            browser.call("Page.navigate", {"url": page.as_uri()}, page=True)
            found[width] = browser.wait_for(
                "(document.getElementById('broken-words') || {}).textContent",
                scaled(BROWSER_TIMEOUT_S),
            )
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_table_cells_never_break_inside_a_word(broken_words: dict[int, str | None], width: int):
    """Issue 13: the Variants table read "baselin e" and "dataloa der-workers"."""
    probed = broken_words[width]
    assert probed is not None, f"the probe never wrote its list at width {width}"
    broken = json.loads(probed)
    words = {"baseline", "dataloader-workers", "set-num-threads", "reference", "accepted"}
    assert not words & set(broken), broken
