"""`perfdoctor view` in a real browser: the viewer loads a recorded run's trace, draws it with
perfdoctor's track, and no request goes anywhere but the view server on 127.0.0.1.

One Chromium run (driven over a pipe, cdp_pipe.py) serves every check: the trace viewer's
model read back from the page, a screenshot (kept under test-artifacts/ for people to look
at), Chromium's network log, and the server's own list of requests. Chromium runs with every
host name but 127.0.0.1 mapped to nothing, so a viewer that needed the network could not
draw at all; the network log shows whether it even tried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cdp_pipe import Chromium, chromium_path
from load_limits import scaled

from perfdoctor.tensorboard_launch import profiler_plugin_installed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed"),
    pytest.mark.skipif(
        not profiler_plugin_installed(), reason="torch-tb-profiler is not installed"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "runs" / "cnn_slow_dataloader_cpu"
ARTIFACTS = ROOT / "test-artifacts"
LOAD_TIMEOUT_S = 60

# The viewer's model, read from the embedding page inside perfdoctor's iframe.
_MODEL = """(() => {
  const frame = document.getElementById("viewer");
  const doc = frame && frame.contentDocument;
  const view = doc && doc.querySelector("tr-ui-timeline-view");
  const model = view && view.model;
  if (!model) return null;
  return {
    state: document.body.dataset.state,
    processes: model.getAllProcesses().map((p) => ({
      name: p.name || "",
      threads: Object.values(p.threads).map((t) => ({
        name: t.name || "",
        slices: t.sliceGroup.slices.map((s) => s.title),
      })),
    })),
    global_instants: model.instantEvents.map((e) => e.title),
  };
})()"""


@dataclass(frozen=True)
class Viewed:
    model: dict[str, Any] | None
    shot: Path
    net_log: Path
    served: list[str]
    url: str


@pytest.fixture(scope="module")
def viewed(tmp_path_factory: pytest.TempPathFactory) -> Viewed:
    from perfdoctor.view.prepare import prepare_view
    from perfdoctor.view.server import bind

    work = tmp_path_factory.mktemp("view")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "view-trace.png"
    shot.unlink(missing_ok=True)
    net_log = work / "netlog.json"
    running = bind(prepare_view(RUN).site).start_in_thread()
    try:
        with Chromium(
            work / "profile",
            f"--log-net-log={net_log}",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ) as browser:
            browser.open(running.url)
            model = browser.wait_for(_MODEL, scaled(LOAD_TIMEOUT_S))
            # The model is set before the first frame is painted: let the tracks draw.
            browser.wait_for("new Promise((r) => setTimeout(() => r(true), 1000))", 10)
            browser.screenshot(shot)
    finally:
        running.close()
    return Viewed(model, shot, net_log, list(running.site.requests), running.url)


def _process(model: dict[str, Any], name: str) -> dict[str, Any]:
    found = [p for p in model["processes"] if p["name"].startswith(name)]
    assert found, [p["name"] for p in model["processes"]]
    return found[0]


def test_the_trace_is_loaded_with_the_perfdoctor_track(viewed: Viewed):
    model = viewed.model
    assert model is not None, "the viewer never built its model"
    assert model["state"] == "sent"
    track = _process(model, "perfdoctor")
    threads = {t["name"]: t["slices"] for t in track["threads"]}
    assert [s for s in threads["steps"] if s.startswith("step ")] == [
        f"step {i} ({phase})"
        for i, phase in enumerate(["warmup"] * 2 + ["timed"] * 5 + ["profiled"] * 2)
    ]
    assert threads["phases"] == [
        "warm-up (not measured): steps 0-1",
        "timed steps (no profiler): steps 2-6",
        "profiled window: steps 7-8",
    ]
    assert len(model["global_instants"]) == 3
    # The trace's own events are there too: the script's thread with its Python frames.
    python = _process(model, "python")
    assert sum(len(t["slices"]) for t in python["threads"]) > 1000


def test_the_events_are_drawn(viewed: Viewed):
    import numpy as np
    from PIL import Image

    with Image.open(viewed.shot) as image:
        rgb = np.asarray(image.convert("RGB"), dtype=np.int16)
    # The viewer's slices are saturated colours; its chrome is grey, white and black.
    saturation = rgb.max(axis=2) - rgb.min(axis=2)
    coloured = int((saturation > 60).sum())
    assert coloured > 50_000, f"only {coloured} coloured pixels: nothing drawn? ({viewed.shot})"


def _page_requests(net_log: Path) -> list[str]:
    """http(s) URLs that a document asked for, from Chromium's --log-net-log JSON. Chromium's
    own background fetches (time sync, component updates) and the navigation typed into it
    carry no page initiator ("not an origin"): they are the browser's, not the page's."""
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


def test_no_request_leaves_the_machine(viewed: Viewed):
    requests = _page_requests(viewed.net_log)
    # The check sees the page's own requests (else an empty list would prove nothing) ...
    assert viewed.url + "trace.json" in requests
    # ... and every one of them went to the view server.
    assert [u for u in requests if not u.startswith(viewed.url)] == []
    assert {"/", "/trace_embedding.html", "/webcomponents.min.js", "/trace.json"} <= set(
        viewed.served
    )
