"""TensorBoard with the PyTorch Profiler plugin on a perfdoctor-shaped logdir.

The logdir holds REAL profiler traces, written by a tiny torch loop through
`tensorboard_trace_handler(use_gzip=True)` into `baseline/` and a variant directory, plus
the per-step scalars `write_scalars` puts next to them. We start TensorBoard the way
`perfdoctor tensorboard` does and query the plugin's HTTP API (routes from
torch_tb_profiler/plugin.py: runs, views, workers, spans, overview, operation/table,
memory, trace, diff) and the scalars API. Bound to 127.0.0.1, every wait bounded, the
server always stopped.
"""

from __future__ import annotations

import gzip
import json
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from load_limits import scaled

from perfdoctor.errors import EXIT_MISSING_TOOL, BadRunDir
from perfdoctor.render.tensorboard_export import write_scalars
from perfdoctor.tensorboard_launch import (
    TensorBoardFailed,
    profiler_plugin_installed,
    start_tensorboard,
    stop_tensorboard,
)

pytestmark = pytest.mark.integration
needs_plugin = pytest.mark.skipif(
    not profiler_plugin_installed(),
    reason="torch-tb-profiler is not installed (pip install torch-tb-profiler)",
)

VARIANT = "dataloader-workers"
LOAD_TIMEOUT_S = 90
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _write_trace(run_dir: Path, width: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(run_dir), use_gzip=True),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for _ in range(5):
            loss = model(torch.randn(64, 32)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()


def _series() -> dict[str, Any]:
    def steps(base: float) -> dict[str, list[float]]:
        return {"index": list(range(6)), "wall_ms": [base + i % 2 for i in range(6)]}

    return {"steps": {"baseline": steps(40.0), VARIANT: steps(17.0)}}


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory: pytest.TempPathFactory):
    session = tmp_path_factory.mktemp("session")
    _write_trace(session / "baseline", width=64)
    _write_trace(session / VARIANT, width=16)
    write_scalars(session, _series())
    assert list((session / "baseline").glob("*.pt.trace.json.gz"))
    process, url = start_tensorboard(session, ready_timeout_s=scaled(60))
    try:
        assert url.startswith("http://127.0.0.1:")
        yield url
    finally:
        stop_tensorboard(process)
        assert process.poll() is not None


def _get(url: str) -> Any:
    with _OPENER.open(url, timeout=scaled(60)) as response:
        data = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            data = gzip.decompress(data)
    return json.loads(data)


def _profiler(base: str, route: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    return _get(f"{base}data/plugin/pytorch_profiler/{route}" + (f"?{query}" if query else ""))


def _loaded_runs(base: str) -> list[str]:
    deadline = time.monotonic() + scaled(LOAD_TIMEOUT_S)
    runs: dict[str, Any] = {}
    while time.monotonic() < deadline:
        runs = _profiler(base, "runs")
        if not runs["loading"] and {"baseline", VARIANT} <= set(runs["runs"]):
            return runs["runs"]
        time.sleep(0.5)
    pytest.fail(f"the profiler plugin did not load both runs in {LOAD_TIMEOUT_S} s: {runs}")


def _worker_span(base: str, run: str) -> tuple[str, str]:
    workers = _profiler(base, "workers", run=run, view="Overview")
    assert workers, run
    spans = _profiler(base, "spans", run=run, worker=workers[0])
    return workers[0], (spans[0] if spans else "")


@needs_plugin
def test_runs_and_views(tensorboard):
    runs = _loaded_runs(tensorboard)
    assert "baseline" in runs and VARIANT in runs
    views = _profiler(tensorboard, "views", run="baseline")
    assert {"Overview", "Operator", "Trace", "Memory"} <= set(views)


@needs_plugin
def test_overview_steps(tensorboard):
    _loaded_runs(tensorboard)
    worker, span = _worker_span(tensorboard, "baseline")
    overview = _profiler(tensorboard, "overview", run="baseline", worker=worker, span=span)
    rows = overview["steps"]["rows"]
    assert len(rows) == 3  # the three active profiler steps
    assert {c["name"] for c in overview["steps"]["columns"] if "name" in c} >= {"CPU Exec"}
    assert any(e["value"] == "CPU" for e in overview["environments"])


@needs_plugin
def test_operator_memory_and_trace_views(tensorboard):
    _loaded_runs(tensorboard)
    worker, span = _worker_span(tensorboard, "baseline")
    ops = _profiler(
        tensorboard,
        "operation/table",
        run="baseline",
        worker=worker,
        span=span,
        group_by="Operation",
    )
    names = {row["name"] for row in ops["data"]}
    assert "aten::addmm" in names
    memory = _profiler(tensorboard, "memory", run="baseline", worker=worker, span=span)
    assert memory["rows"]
    trace = _profiler(tensorboard, "trace", run="baseline", worker=worker, span=span)
    assert trace["traceEvents"]


@needs_plugin
def test_diff_between_variants(tensorboard):
    _loaded_runs(tensorboard)
    worker, span = _worker_span(tensorboard, "baseline")
    exp_worker, exp_span = _worker_span(tensorboard, VARIANT)
    diff = _profiler(
        tensorboard,
        "diff",
        run="baseline",
        worker=worker,
        span=span,
        exp_run=VARIANT,
        exp_worker=exp_worker,
        exp_span=exp_span,
    )
    assert diff["left"]["aggs"] and diff["right"]["aggs"]


@needs_plugin
def test_scalars_sit_in_the_same_runs(tensorboard):
    tags = _get(f"{tensorboard}data/plugin/scalars/tags")
    assert "step/wall_ms" in tags["baseline"]
    assert "step/wall_ms" in tags[VARIANT]


def test_missing_logdir_is_a_clear_error(tmp_path: Path):
    with pytest.raises(BadRunDir, match="not a directory"):
        start_tensorboard(tmp_path / "absent")


def test_a_taken_port_is_reported_not_hung(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(TensorBoardFailed, match="already in use") as err:
            start_tensorboard(tmp_path, port=port, ready_timeout_s=scaled(60))
    assert err.value.exit_code == EXIT_MISSING_TOOL


@needs_plugin
def test_the_plugin_reads_dataloader_zero_from_a_trace_that_holds_dataloader_spans() -> None:
    """What the report's "PyTorch Profiler tab" note (render/summary.profiler_tab_note)
    explains: the recorded cnn_slow_dataloader trace holds enumerate(DataLoader) spans as
    user_annotation, which torch-tb-profiler drops, so its DataLoader cost is 0."""
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole

    from perfdoctor.analyze.facts import derive_facts
    from perfdoctor.analyze.record import load_run

    run = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "cnn_slow_dataloader_cpu"
    (trace_path,) = run.glob("*.pt.trace.json.gz")
    with gzip.open(trace_path, "rt") as fh:
        trace = json.load(fh)
    spans = [e for e in trace["traceEvents"] if e.get("name", "").startswith("enumerate(DataL")]
    assert spans and {e.get("cat") for e in spans} == {"user_annotation"}
    data = RunProfileData.from_json("worker", "span", trace)
    data.process()
    assert data.avg_costs.costs[ProfileRole.DataLoader] == 0
    assert (derive_facts(load_run(run)).get("dataloader_trace_ms_per_step") or 0) > 0
