"""Flag-style appliers in-process on CPU: debug modes, anomaly detection, CPU threads,
cuDNN flags, expandable segments, and the registry itself."""

from __future__ import annotations

import json

import pytest
import torch
from appliers_support import Mlp, batches, seeded

from perfdoctor.collect import appliers
from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.debug import InertProfiler
from perfdoctor.optimize.catalog import CATALOG


def test_every_runtime_and_env_optimization_has_an_applier():
    wanted = {i for i, o in CATALOG.items() if o.kind in ("runtime", "env")}
    assert set(appliers.APPLIERS) == wanted


def test_manual_ids_are_reported_as_not_applied(harness_factory):
    row = harness_factory("larger-batch").results()["larger-batch"]
    assert row == {
        "id": "larger-batch",
        "applied": False,
        "verified": False,
        "detail": "no runtime applier: a manual change (see the recommendation)",
    }


def test_anomaly_detection_of_the_script_is_ignored(harness_factory):
    harness = harness_factory("anomaly-off")
    torch.autograd.set_detect_anomaly(True)  # what the script does
    assert not torch.is_anomaly_enabled()
    with torch.autograd.detect_anomaly():
        assert not torch.is_anomaly_enabled()
    model = seeded(Mlp)
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["anomaly-off"]
    assert row["applied"] and row["verified"], row
    assert "2 enable call(s)" in row["detail"]


def test_anomaly_api_restored_after_uninstall(harness_factory):
    harness = harness_factory("anomaly-off")
    harness.close()
    warning = pytest.warns(UserWarning, match="Anomaly Detection has been enabled")
    with warning, torch.autograd.detect_anomaly():
        assert torch.is_anomaly_enabled()
    assert not torch.is_anomaly_enabled()


def test_script_profiler_is_inert_but_usable(harness_factory, tmp_path):
    harness = harness_factory("debug-modes-off")
    model = seeded(Mlp)
    with torch.profiler.profile(record_shapes=True) as prof:  # the script's own profiler
        assert not torch.autograd.profiler._is_profiler_enabled
        model(torch.randn(2, 8))
        prof.step()
    assert prof.key_averages().table(sort_by="cpu_time_total") == ""
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    assert json.loads((tmp_path / "trace.json").read_text()) == {"traceEvents": []}
    with torch.autograd.profiler.profile() as legacy, torch.autograd.profiler.emit_nvtx():
        model(torch.randn(2, 8))
    assert list(legacy.events()) == []
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["debug-modes-off"]
    assert row["applied"] and row["verified"], row
    assert "2 profiler, 1 emit_nvtx" in row["detail"]


def test_perfdoctor_keeps_a_real_profiler(harness_factory):
    harness_factory("debug-modes-off")
    # Code that lives in a perfdoctor module (the probes' profiler window) gets the real one.
    namespace = {"__name__": "perfdoctor.collect.window", "torch": torch}
    exec("def open_window():\n    return torch.profiler.profile()", namespace)
    with namespace["open_window"]() as prof:
        torch.ones(3).sum()
    assert not isinstance(prof, InertProfiler)
    assert len(prof.events()) > 0


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cpu_threads_raised_and_held_against_the_script(harness_factory, keep_threads):
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 would leave it
    harness = harness_factory("cpu-threads")
    target = base.usable_cores()
    assert torch.get_num_threads() == target
    torch.set_num_threads(1)  # the script lowers it again
    assert torch.get_num_threads() == target
    model = seeded(Mlp)
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["cpu-threads"]
    assert row["applied"] and row["verified"], row
    assert "the script asked for [1]" in row["detail"]
    harness.close()
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1  # uninstalled: the plain API again


def test_cpu_threads_that_change_nothing_are_refused(harness_factory, keep_threads):
    torch.set_num_threads(base.usable_cores())  # the script already uses every core
    harness = harness_factory("cpu-threads")
    model = seeded(Mlp)
    harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
    row = harness.results()["cpu-threads"]
    assert not row["applied"], row
    assert "nothing to change" in row["detail"]
    harness.close()


def test_cudnn_flags_set_and_checked_later(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    try:
        harness = harness_factory("cudnn-benchmark", "cudnn-nondeterministic")
        torch.backends.cudnn.deterministic = True  # the script's setup, before training
        model = seeded(Mlp)
        harness.train(model, torch.optim.SGD(model.parameters(), lr=0.1), batches((4, 8)), steps=3)
        assert torch.backends.cudnn.benchmark is True
        assert torch.backends.cudnn.deterministic is False
        torch.backends.cudnn.benchmark = False  # the script resets it mid-run
        rows = harness.results()
        assert rows["cudnn-nondeterministic"]["verified"] is True
        assert rows["cudnn-benchmark"]["applied"] is True
        assert rows["cudnn-benchmark"]["verified"] is False  # the late reset is caught
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before


def test_cuda_only_flags_refused_on_cpu(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: False)
    rows = harness_factory("cudnn-benchmark", "expandable-segments").results()
    assert all(r["applied"] is False and "CUDA" in r["detail"] for r in rows.values())


def test_expandable_segments_checks_the_child_environment(harness_factory, monkeypatch):
    monkeypatch.setattr(base, "cuda_available", lambda: True)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64,expandable_segments:True")
    row = harness_factory("expandable-segments").results()["expandable-segments"]
    assert row["applied"] and row["verified"], row
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    row = harness_factory("expandable-segments").results()["expandable-segments"]
    assert row["applied"] is False and "did not set it" in row["detail"]


def test_a_failing_applier_becomes_a_refusal(harness_factory, monkeypatch):
    from perfdoctor.collect.appliers import optim

    def broken(self, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(optim.FusedOptimizer, "install", broken)
    row = harness_factory("fused-optimizer").results()["fused-optimizer"]
    assert row["applied"] is False and "applier failed: RuntimeError: boom" in row["detail"]
