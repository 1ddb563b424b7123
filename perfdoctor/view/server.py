"""`perfdoctor view`: one trace in the trace viewer, served on 127.0.0.1 only.

Five fixed paths and nothing else: perfdoctor's page, the plugin's embedding page and viewer,
the polyfill, and the trace (with perfdoctor's markers spliced in, document.py). Every
response carries a Content-Security-Policy that lets the page load from this server alone,
so even a viewer release that reached for a font or a script elsewhere could not.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from perfdoctor.errors import UsageError

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
# 'unsafe-inline'/'unsafe-eval'/data:: the viewer is a vulcanized page of inline scripts and
# styles, and the polyfill runs the imported page's scripts through data: URLs.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; "
    "script-src 'self' 'unsafe-inline' 'unsafe-eval' data: blob:; "
    "style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'self'; form-action 'none'"
)


@dataclass(frozen=True)
class Resource:
    body: bytes
    content_type: str


@dataclass
class ViewSite:
    """What the server answers: path -> resource, and every path it was asked for."""

    resources: dict[str, Resource]
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, path: str) -> None:
        with self.lock:
            self.requests.append(path)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        site = self.server.site
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        site.note(self.path)
        resource = site.resources.get("/index.html" if path == "/" else path)
        if resource is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", resource.content_type)
        self.send_header("Content-Length", str(len(resource.body)))
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if send_body:
            # A tab closed mid-load is no error of ours.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(resource.body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("view: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False  # a port someone else serves on is refused, not shared

    def __init__(self, address: tuple[str, int], site: ViewSite) -> None:
        self.site = site
        super().__init__(address, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A browser that drops a connection (a reload, a closed tab) is no error of ours.
        log.debug("view: request from %s failed", client_address, exc_info=True)


@dataclass
class RunningView:
    server: _Server
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server.server_port}/"

    @property
    def site(self) -> ViewSite:
        return self.server.site

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C (or shutdown() from another thread)."""
        self.server.serve_forever(poll_interval=0.2)

    def start_in_thread(self) -> RunningView:
        self.thread = threading.Thread(target=self.serve_forever, name="perfdoctor-view")
        self.thread.daemon = True
        self.thread.start()
        return self

    def close(self) -> None:
        if self.thread is not None:
            self.server.shutdown()
            self.thread.join(timeout=10)
        self.server.server_close()


def bind(site: ViewSite, port: int | None = None) -> RunningView:
    """Bind 127.0.0.1:`port` (None or 0: a free one the OS picks, so there is no race)."""
    try:
        return RunningView(_Server((HOST, port or 0), site))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {HOST} is already in use",
                hint="choose another --port, or leave it out for a free one",
            ) from None
        raise


def build_site(
    index_html: str, embedding_html: str, viewer: Path, polyfill: Path, trace: bytes
) -> ViewSite:
    html = "text/html; charset=utf-8"
    return ViewSite(
        {
            "/index.html": Resource(index_html.encode(), html),
            "/trace_embedding.html": Resource(embedding_html.encode(), html),
            "/trace_viewer_full.html": Resource(viewer.read_bytes(), html),
            "/webcomponents.min.js": Resource(
                polyfill.read_bytes(), "text/javascript; charset=utf-8"
            ),
            "/trace.json": Resource(trace, "application/json"),
        }
    )
