"""The Chrome trace viewer that torch-tb-profiler ships, made to work with no network.

tb_plugin's own frontend shows a trace by loading `trace_embedding.html` in an iframe and,
once that page posts {msg: "ready"}, posting it {msg: "data", data: <trace JSON>}. The
embedding page pulls in `trace_viewer_full.html` as an HTML import, which current browsers
only support through the Web Components v0 polyfill; the plugin loads that polyfill from a
CDN, so without internet access the viewer stays blank. perfdoctor serves the same two files
from the installed package, with the polyfill's script tag pointed at a copy shipped in
perfdoctor (vendor/, BSD-licensed, unmodified) and every other external reference removed.
"""

from __future__ import annotations

import html
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from perfdoctor.errors import MissingTool

VIEWER_FILE = "trace_viewer_full.html"
EMBEDDING_FILE = "trace_embedding.html"
POLYFILL_NAME = "webcomponents.min.js"
POLYFILL_FILE = Path(__file__).with_name("vendor") / "webcomponents-0.7.24.min.js"
INSTALL_HINT = "pip install torch-tb-profiler   (or: pip install 'perfdoctor[tb]')"

# A tag attribute that loads from another origin: src="http://...", href="//...".
_EXTERNAL_SCRIPT = re.compile(
    r"<script\b[^>]*\bsrc\s*=\s*[\"'](?:https?:)?//[^\"']*[\"'][^>]*>\s*</script>", re.I
)
_EXTERNAL_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"'](?:https?:)?//[^\"']*[\"'][^>]*>", re.I)
_EXTERNAL_ATTR = re.compile(r"\b(?:src|href)\s*=\s*[\"'](?:https?:)?//", re.I)


@dataclass(frozen=True)
class ViewerFiles:
    static_dir: Path

    @property
    def viewer(self) -> Path:
        return self.static_dir / VIEWER_FILE

    @property
    def embedding(self) -> Path:
        return self.static_dir / EMBEDDING_FILE


def find_viewer() -> ViewerFiles:
    """The installed plugin's static files; MissingTool (exit code 69) without them. The
    package is found, not imported: importing it starts TensorBoard's plugin machinery."""
    try:
        spec = importlib.util.find_spec("torch_tb_profiler")
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    if origin is None:
        raise MissingTool(
            "perfdoctor view needs the trace viewer of torch-tb-profiler, which is not installed",
            hint=INSTALL_HINT,
        )
    files = ViewerFiles(Path(origin).parent / "static")
    for path in (files.viewer, files.embedding):
        if not path.is_file():
            raise MissingTool(
                f"torch-tb-profiler is installed without its trace viewer ({path.name})",
                hint="reinstall it: pip install --force-reinstall torch-tb-profiler",
            )
    return files


def offline_embedding(text: str) -> str:
    """trace_embedding.html with the polyfill served by us and nothing loaded from elsewhere."""
    local = f'<script src="{POLYFILL_NAME}"></script>'
    replaced = [False]

    def script(match: re.Match[str]) -> str:
        # The first external script is the polyfill (the only one the plugin's page loads).
        if POLYFILL_NAME in match.group(0) and not replaced[0]:
            replaced[0] = True
            return local
        return ""

    text = _EXTERNAL_SCRIPT.sub(script, text)
    text = _EXTERNAL_LINK.sub("", text)
    if not replaced[0]:
        # A plugin release that stops loading the polyfill from outside: load ours first.
        text = text.replace("<head>", "<head>\n    " + local, 1)
    if _EXTERNAL_ATTR.search(text):
        raise MissingTool(
            f"the installed torch-tb-profiler's {EMBEDDING_FILE} loads something from the "
            "network that perfdoctor cannot replace",
            hint="report it, with the plugin's version",
        )
    return text


def index_page(title: str, note: str) -> str:
    """perfdoctor's page: one line saying what is shown, and the plugin's embedding page in
    an iframe, fed the trace as tb_plugin's frontend feeds it."""
    return _INDEX.replace("$TITLE", html.escape(title)).replace("$NOTE", html.escape(note))


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>perfdoctor view: $TITLE</title>
<style>
  html, body { margin: 0; height: 100%; font: 13px system-ui, sans-serif; }
  body { display: flex; flex-direction: column; }
  header { padding: 4px 8px; border-bottom: 1px solid #ccc; white-space: nowrap;
           overflow: hidden; text-overflow: ellipsis; }
  #status { color: #555; margin-left: 1em; }
  iframe { flex: 1 1 auto; border: 0; width: 100%; }
</style>
</head>
<body data-state="loading">
<header><b>perfdoctor view</b> $TITLE <span id="status">$NOTE</span></header>
<iframe id="viewer" src="trace_embedding.html" title="trace viewer"></iframe>
<script>
"use strict";
(function () {
  const frame = document.getElementById("viewer");
  const status = document.getElementById("status");
  let sent = false;
  window.addEventListener("message", async (event) => {
    if (event.source !== frame.contentWindow || (event.data || {}).msg !== "ready" || sent) {
      return;
    }
    sent = true;
    document.body.dataset.state = "fetching";
    try {
      const response = await fetch("trace.json");
      if (!response.ok) throw new Error("HTTP " + response.status);
      const text = await response.text();
      const message = { msg: "data", data: text, name: document.title };
      frame.contentWindow.postMessage(message, location.origin);
      document.body.dataset.state = "sent";
    } catch (err) {
      document.body.dataset.state = "failed";
      status.textContent = "could not load the trace: " + err;
    }
  });
})();
</script>
</body>
</html>
"""
