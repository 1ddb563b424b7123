"""Part 2 of issue 22: device malloc/free in the step, on synthetic traces and on AlexNet."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor import rundir
from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.trace import load_trace
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import gpu_view, summary
from perfdoctor.rules import evaluate

from .gpu_corpus import corpus_dir
from .run_dir_builder import OBSERVATIONS, build_run_dir, rewrite_json
from .synthetic_trace import write_trace
from .timeline_traces import allocator_storm

ALEXNET = "hta_critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"


def test_the_allocator_storm_is_measured_and_taken_out_of_host_busy(tmp_path: Path) -> None:
    t = load_trace(write_trace(tmp_path / "t.json", allocator_storm()))
    f = t.timeline_facts
    assert f["alloc_call_count"] == 3 * 60 * 2
    assert f["alloc_syncing_free_count"] == 3 * 60
    assert f["alloc_calls_per_step"] == pytest.approx(120)
    idle = f["gpu_idle_alloc_frac"]
    assert isinstance(idle, float) and idle > 0.4
    assert t.gpu is not None and t.gpu.idle_host_busy_frac is not None
    # The host-busy row keeps only what is not the allocator.
    assert f["gpu_idle_host_busy_frac"] == pytest.approx(t.gpu.idle_host_busy_frac - idle)


def test_the_storm_headlines_with_its_cause_and_fix(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", allocator_storm())
    (done,) = diagnose_traces([path], tmp_path / "out")
    report = done.report
    assert report is not None
    top = report.findings[0]
    assert "allocator-churn" in (top.rule_id, *top.related)
    assert "allocation" in summary.headline(report).slow
    text = " ".join(f.explanation for f in report.findings)
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in text
    rows = {r.label: r.value for r in gpu_view.timeline_rows(report)}
    assert "idle: malloc/free" in rows


def test_empty_cache_in_the_loop_is_named(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", allocator_storm(frees_per_step=5, empty_cache=True))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    (alloc,) = [f for f in done.report.findings if "allocator-churn" in (f.rule_id, *f.related)]
    assert "empty_cache" in alloc.explanation


def test_a_trace_without_allocator_calls_has_no_allocator_finding(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", allocator_storm(frees_per_step=0))
    t = load_trace(path)
    assert t.timeline_facts["alloc_call_count"] == 0
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    assert not [f for f in done.report.findings if "allocator-churn" in (f.rule_id, *f.related)]


def test_alexnet_idles_in_cudafree_and_gets_the_pool_growth_fix(tmp_path: Path) -> None:
    root = corpus_dir()
    if root is None or not (root / "traces" / ALEXNET).is_file():
        pytest.skip("shared GPU corpus not found")
    path = root / "traces" / ALEXNET
    f = load_trace(path).timeline_facts
    # 6.5 s of cudaFree and 2 s of cudaMalloc in a 12.9 s window, the GPU idle meanwhile.
    assert f["alloc_syncing_free_count"] == 5
    assert f["gpu_idle_alloc_frac"] == pytest.approx(0.656, abs=0.01)
    (done,) = diagnose_traces([path], tmp_path)
    assert done.report is not None
    top = done.report.findings[0]
    assert "allocator-churn" in (top.rule_id, *top.related)
    assert "expandable-segments" in top.optimizations


def test_a_profile_run_with_caching_off_gets_the_allocator_finding(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path)
    obs = run / rundir.OBSERVATIONS_FILE
    memory = {**OBSERVATIONS["cuda_memory"], "device_allocs": 1360, "caching_disabled": True}
    rewrite_json(obs, cuda_memory=memory)
    facts = derive_facts(load_run(run))
    assert facts.get("caching_allocator_disabled") is True
    assert facts.get("device_alloc_count") == 1360
    results = evaluate(facts)
    ids = {i for f in results.findings for i in (f.rule_id, *f.related)}
    assert "allocator-churn" in ids


def test_a_hipfree_storm_without_steps_is_the_same_finding(tmp_path: Path) -> None:
    """ROCm names, no ProfilerStep spans (issue 22's 1,360-hipFree trace had none): counted
    over the GPU window, named as caching off or emptied every step."""
    trace = allocator_storm(with_steps=False, free_call="hipFree", malloc_call="hipMalloc")
    path = write_trace(tmp_path / "t.json", trace)
    f = load_trace(path).timeline_facts
    assert f["alloc_syncing_free_count"] == 180
    assert f["alloc_calls_per_step"] is None
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    top = done.report.findings[0]
    assert "allocator-churn" in (top.rule_id, *top.related)
    text = " ".join(x.explanation for x in done.report.findings)
    assert "off or emptied every step" in text and "PYTORCH_NO_HIP_MEMORY_CACHING" in text
    assert "keep-allocator-caching" in top.optimizations
    assert "Keep PyTorch's caching allocator on" in summary.headline(done.report).fix
