"""What `perfdoctor view RUN` serves for each kind of RUN, the viewer made offline, and the
server's answers (in this process, on 127.0.0.1)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from perfdoctor.errors import EXIT_MISSING_TOOL, BadRunDir, MissingTool, TargetNotFound
from perfdoctor.view import assets
from perfdoctor.view.source import find_view_source

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "cnn_slow_dataloader_cpu"
TRACE = next(FIXTURE.glob("*.pt.trace.json.gz"))
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def session(tmp_path: Path) -> Path:
    """A session: session.json, baseline/ (the recorded run), a rank directory, `latest`."""
    root = tmp_path / "perfdoctor-runs"
    session = root / "20261201-120000-cnn_slow_dataloader"
    shutil.copytree(FIXTURE, session / "baseline")
    (session / "session.json").write_text("{}")
    rank = session / "baseline" / "ranks" / "1"
    rank.mkdir(parents=True)
    shutil.copy(TRACE, rank / "vm_2.1.pt.trace.json.gz")
    (root / "latest").symlink_to(session.name)
    return session


def test_a_session_shows_its_baselines_trace(session: Path):
    for given in (session, session.parent, session.parent / "latest"):
        source = find_view_source(given)
        assert source.trace.name == TRACE.name
        assert source.steps_dir == (session / "baseline").resolve()


def test_a_run_a_rank_and_a_trace_file(session: Path):
    assert find_view_source(session / "baseline").trace.name == TRACE.name
    rank = find_view_source(session / "baseline" / "ranks" / "1")
    assert rank.trace.name == "vm_2.1.pt.trace.json.gz"
    assert rank.steps_dir is None  # no steps.jsonl beside it: no markers
    single = find_view_source(session / "baseline" / TRACE.name)
    assert single.steps_dir == (session / "baseline").resolve()


def test_several_traces_show_the_newest_and_count_the_others(session: Path):
    older = session / "baseline" / "vm_12593.9.pt.trace.json.gz"
    shutil.copy(TRACE, older)
    os.utime(older, (1_000_000, 1_000_000))
    source = find_view_source(session)
    assert source.trace.name == TRACE.name  # the newest, though "9" sorts after "1795..."
    assert len(source.others) == 1


def test_what_cannot_be_shown(session: Path, tmp_path: Path):
    with pytest.raises(TargetNotFound):
        find_view_source(tmp_path / "missing")
    aside = tmp_path / "aside"
    aside.mkdir()
    (session / "baseline" / "steps.jsonl").rename(aside / "steps.jsonl")
    with pytest.raises(BadRunDir, match="not a trace file"):
        find_view_source(aside / "steps.jsonl")
    for trace in (session / "baseline").glob("*.pt.trace.json.gz"):
        trace.unlink()
    with pytest.raises(BadRunDir, match="no profiler trace"):
        find_view_source(session)
    with pytest.raises(BadRunDir):
        find_view_source(tmp_path / "perfdoctor-runs" / "..")  # no session in it


def test_a_run_without_a_trace_shows_its_steps_alone(session: Path):
    """An in-process A/B run records no trace: its steps, phases and blocks are the view."""
    run = session / "ab"
    run.mkdir()
    arms = ["baseline", "baseline", "compile", "compile"]
    lines = [
        json.dumps(
            {
                "index": i,
                "phase": "warmup" if i < 2 else "timed",
                "wall_ms": 10.0,
                "arm": None if i < 2 else arms[i - 2],
            }
        )
        for i in range(6)
    ]
    (run / "steps.jsonl").write_text("\n".join(lines) + "\n")
    source = find_view_source(run)
    assert source.trace is None and source.steps_dir == run.resolve()
    try:
        assets.find_viewer()
    except MissingTool:
        return
    from perfdoctor.view.prepare import prepare_view

    prepared = prepare_view(run)
    served = json.loads(prepared.site.resources["/trace.json"].body)
    blocks = [e["name"] for e in served["traceEvents"] if e.get("tid") == 3 and e["ph"] == "X"]
    assert blocks == ["block 1: baseline (steps 2-3)", "block 2: compile (steps 4-5)"]
    assert prepared.markers.note.startswith("no profiler trace in this run")
    steps = [e for e in served["traceEvents"] if e.get("tid") == 2 and e["ph"] == "X"]
    assert [e["ts"] for e in steps] == [i * 10_000.0 for i in range(6)]


def test_without_the_plugin_view_says_what_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingTool) as caught:
        assets.find_viewer()
    assert caught.value.exit_code == EXIT_MISSING_TOOL == 69
    assert "pip install torch-tb-profiler" in (caught.value.hint or "")


PLUGIN_PAGE = """<head>
    <script src="https://cdn.example/ajax/libs/webcomponentsjs/0.7.24/webcomponents.min.js"></script>
    <link rel="stylesheet" href="//fonts.example/css?family=Roboto">
    <link rel="import" href="trace_viewer_full.html">
</head>"""


def test_the_embedding_page_loads_nothing_from_elsewhere():
    page = assets.offline_embedding(PLUGIN_PAGE)
    assert '<script src="webcomponents.min.js"></script>' in page
    assert "example" not in page
    assert '<link rel="import" href="trace_viewer_full.html">' in page
    # A page without the polyfill gets ours first.
    bare = assets.offline_embedding('<head><link rel="import" href="x.html"></head>')
    assert bare.index("webcomponents.min.js") < bare.index("x.html")


def test_the_installed_plugins_page_made_offline():
    try:
        files = assets.find_viewer()
    except MissingTool:
        pytest.skip("torch-tb-profiler is not installed")
    page = assets.offline_embedding(files.embedding.read_text(encoding="utf-8"))
    assert "//" not in "".join(
        line for line in page.splitlines() if "src=" in line or "href=" in line
    )
    assert 'src="webcomponents.min.js"' in page
    assert assets.POLYFILL_FILE.is_file()


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with _OPENER.open(url, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), b""


def test_the_server_answers_its_five_paths_and_nothing_else(session: Path):
    try:
        assets.find_viewer()
    except MissingTool:
        pytest.skip("torch-tb-profiler is not installed")
    from perfdoctor.view.prepare import prepare_view
    from perfdoctor.view.server import bind

    before = TRACE.read_bytes()
    prepared = prepare_view(session)
    running = bind(prepared.site).start_in_thread()
    try:
        assert running.url.startswith("http://127.0.0.1:")
        status, headers, body = _get(running.url)
        assert status == 200 and b'src="trace_embedding.html"' in body
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        status, _, body = _get(running.url + "trace.json")
        served = json.loads(body)
        ours = [e for e in served["traceEvents"] if e.get("pid") == "perfdoctor"]
        assert len([e for e in ours if e["tid"] == 2 and e["ph"] == "X"]) == 9
        for path in ("trace_embedding.html", "trace_viewer_full.html", "webcomponents.min.js"):
            assert _get(running.url + path)[0] == 200, path
        assert _get(running.url + "../etc/passwd")[0] == 404
        assert _get(running.url + "session.json")[0] == 404
    finally:
        running.close()
    assert TRACE.read_bytes() == before  # the file on disk is never changed


REPO = Path(__file__).resolve().parents[3]
CORPUS = Path(os.environ.get("PERFDOCTOR_GPU_CORPUS") or REPO.parent / "shared" / "gpu-corpus")


@pytest.mark.parametrize(
    "name",
    [
        "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ],
)
def test_a_gpu_trace_recorded_elsewhere_is_served_as_it_is(name: str):
    """No steps.jsonl beside it: no markers, and the served JSON is the file's own."""
    import gzip

    trace = CORPUS / "traces" / name
    if not trace.is_file():
        pytest.skip("the GPU corpus is not beside the checkout")
    try:
        assets.find_viewer()
    except MissingTool:
        pytest.skip("torch-tb-profiler is not installed")
    from perfdoctor.view.prepare import prepare_view

    prepared = prepare_view(trace)
    assert prepared.markers.events == ()
    assert "no perfdoctor step records" in prepared.markers.note
    assert prepared.site.resources["/trace.json"].body == gzip.decompress(trace.read_bytes())


def test_a_port_in_use_is_a_usage_error():
    from perfdoctor.errors import UsageError
    from perfdoctor.view.server import ViewSite, bind

    first = bind(ViewSite({}))
    try:
        port = first.server.server_port
        with pytest.raises(UsageError, match=f"port {port}"):
            bind(ViewSite({}), port)
    finally:
        first.close()
