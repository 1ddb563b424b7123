"""The child's record of torch.compile (collect/compile_watch.py), on real dynamo runs with
the eager backend (dynamo's breaks and guards are the same; no C++ compile on CPU)."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from perfdoctor import run_schema  # noqa: E402
from perfdoctor.collect.compile_watch import CompileWatch, classify_warning  # noqa: E402


@pytest.fixture
def watch():
    torch._dynamo.reset()
    w = CompileWatch(lambda: 3)
    assert w.install()
    yield w
    w.uninstall()
    w.unwrap()
    torch._dynamo.reset()


def _breaking(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    torch._dynamo.graph_break()  # the planted break
    return y + 1


def _scaled(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n


def test_graph_break_is_recorded_at_the_users_line_with_the_line_itself(watch) -> None:
    torch.compile(_breaking, backend="eager")(torch.ones(4))
    data = watch.result()
    assert data is not None
    log = run_schema.compile_log(data)
    line = inspect.getsourcelines(_breaking)[1] + 2
    breaks = log.graph_breaks or []
    assert any(f"{__file__}:{line}" in (b.text or "") for b in breaks)
    assert any("torch._dynamo.graph_break()" in (b.code or "") for b in breaks)
    assert all(b.step == 3 for b in breaks)
    assert {f.compile_id for f in log.frames or []} >= {"0/0", "1/0"}


def test_a_recompile_keeps_the_failed_guard(watch) -> None:
    fn = torch.compile(_scaled, backend="eager", dynamic=False)
    for n in (2, 3, 4):
        fn(torch.ones(4), n)
    log = run_schema.compile_log(watch.result())
    texts = [r.text or "" for r in log.recompiles or []]
    assert len(texts) == 2
    assert all("n ==" in t for t in texts)
    assert not any(t.startswith("[") for t in texts)  # the newest failure, not the list
    assert {"0/1", "0/2"} <= {f.compile_id for f in log.frames or []}


def test_the_recompile_limit_the_script_set_is_recorded(watch, monkeypatch) -> None:
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)
    torch.compile(_scaled, backend="eager", dynamic=False)(torch.ones(4), 2)
    assert run_schema.compile_log(watch.result()).recompile_limit == 64


def test_a_cudagraph_skip_is_captured_from_inductors_logger(watch) -> None:
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (1 instances)")
    data = watch.result()
    lines = data["log_lines"]
    assert [ln["kind"] for ln in lines] == ["cudagraph_skip"]
    assert data["counters"]["inductor"]["cudagraph_skips"] >= 1


def test_nothing_compiled_writes_nothing(tmp_path) -> None:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    w = CompileWatch(lambda: 0)
    w.install()
    w.uninstall()
    w.unwrap()
    w.write(tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("skipping cudagraphs due to mutated inputs (1 instances)", "cudagraph_skip"),
        (
            "skipping cudagraph due to function 3 exceeding max re-recording limit (=50) "
            "on cudagraph node None due to static input data pointer changed.",
            "cudagraph_rerecord",
        ),
        ("torch._dynamo hit config.recompile_limit (8)\n   function: 'fwd'", "recompile_limit"),
        ("torch._dynamo hit config.cache_size_limit (8)", "recompile_limit"),
        ("some other warning", None),
    ],
)
def test_warnings_are_classified(message: str, kind: str | None) -> None:
    assert classify_warning(message) == kind


def test_torch_compile_marks_perfdoctors_hooks_as_never_converted(watch) -> None:
    from perfdoctor.collect import compile_watch

    assert getattr(torch.compile, "_perfdoctor_wrapped", False)
    torch.compile(_scaled, backend="eager")  # the first call marks them
    assert set(compile_watch.our_hook_codes()) <= compile_watch._SKIPPED
