"""Part 6 of issue 22: training or inference, and findings framed for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.trace import load_trace
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report
from perfdoctor.render import summary

from .gpu_corpus import corpus_dir
from .synthetic_trace import input_bound_trace, write_trace
from .timeline_traces import inference_decode

QWEN = "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _report(tmp_path: Path, trace: dict[str, Any]) -> Report:
    (done,) = diagnose_traces([write_trace(tmp_path / "t.json", trace)], tmp_path / "out")
    assert done.report is not None
    return done.report


def _with_event(trace: dict[str, Any], **event: Any) -> dict[str, Any]:
    base = {"ph": "X", "pid": 1000, "tid": 1000, "ts": 1_500.0, "dur": 5.0}
    return {**trace, "traceEvents": [*trace["traceEvents"], {**base, **event}]}


def test_a_generate_loop_is_inference(tmp_path: Path) -> None:
    facts = load_trace(write_trace(tmp_path / "t.json", inference_decode())).timeline_facts
    assert facts["workload_kind"] == "inference"
    evidence = str(facts["workload_kind_evidence"])
    assert "Hugging Face generate" in evidence and "KV cache" in evidence
    assert facts["graphs_or_compiled"] is False


def test_backward_ops_make_it_training(tmp_path: Path) -> None:
    trace = _with_event(inference_decode(), cat="cpu_op", name="AddmmBackward0")
    facts = load_trace(write_trace(tmp_path / "t.json", trace)).timeline_facts
    assert facts["workload_kind"] == "training"


def test_a_forward_only_trace_without_inference_signs_is_unknown(tmp_path: Path) -> None:
    facts = load_trace(write_trace(tmp_path / "t.json", input_bound_trace())).timeline_facts
    assert facts["workload_kind"] is None


def test_inference_gets_no_training_batch_advice(tmp_path: Path) -> None:
    report = _report(tmp_path, inference_decode())
    assert report.facts["workload_kind"] == "inference"
    assert report.findings
    for f in report.findings:
        assert "larger-batch" not in f.optimizations
        assert "re-tune" not in f.explanation
        assert "inference trace" in f.explanation
    assert "larger-batch" not in [r.optimization_id for r in report.recommendations]
    assert any("serving-batch" in f.optimizations for f in report.findings)
    # The same loop as training keeps the training advice.
    trained = _report(
        tmp_path / "t", _with_event(inference_decode(), cat="cpu_op", name="AddmmBackward0")
    )
    assert any("larger-batch" in f.optimizations for f in trained.findings)


def test_a_serving_engine_is_not_told_to_compile(tmp_path: Path) -> None:
    trace = _with_event(
        inference_decode(),
        cat="python_function",
        name="vllm/v1/worker/gpu_model_runner.py(3380): execute_model",
    )
    report = _report(tmp_path, trace)
    assert report.findings
    for f in report.findings:
        assert not {"compile", "compile-cudagraphs"} & set(f.optimizations)
    text = " ".join(f.explanation for f in report.findings)
    assert "enforce_eager" in text
    assert any("serving-cuda-graphs" in f.optimizations for f in report.findings)
    recs = [r.optimization_id for r in report.recommendations]
    assert "serving-cuda-graphs" in recs and "compile" not in recs
    # Plain HF generate is not compiled: compile advice stays.
    plain = _report(tmp_path / "p", inference_decode())
    assert any({"compile", "compile-cudagraphs"} & set(f.optimizations) for f in plain.findings)


def test_the_hf_qwen_trace_is_inference(tmp_path: Path) -> None:
    root = corpus_dir()
    if root is None or not (root / "traces" / QWEN).is_file():
        pytest.skip("shared GPU corpus not found")
    facts = load_trace(root / "traces" / QWEN).timeline_facts
    assert facts["workload_kind"] == "inference"
    assert "KV cache" in str(facts["workload_kind_evidence"])
    (done,) = diagnose_traces([root / "traces" / QWEN], tmp_path)
    assert done.report is not None
    for f in done.report.findings:
        assert not {"larger-batch", "dataloader-workers", "fused-optimizer"} & set(f.optimizations)


def test_the_step_table_of_an_inference_trace_has_no_dataloader_rows(tmp_path: Path) -> None:
    rows = dict(summary._trace_step_rows(_report(tmp_path, inference_decode())))
    assert rows["workload"].startswith("inference (")
    assert "DataLoader" not in rows and "waiting for data" not in rows
    trained = _report(tmp_path / "t", input_bound_trace())
    assert "DataLoader" in dict(summary._trace_step_rows(trained))
