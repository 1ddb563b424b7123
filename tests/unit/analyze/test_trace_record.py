"""A RunRecord from traces alone, and the facts it gives (`perfdoctor diagnose`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.trace_inputs import discover
from perfdoctor.analyze.trace_record import device_from_properties, load_trace_run
from perfdoctor.errors import CorruptArtifact
from perfdoctor.rules import evaluate

from .synthetic_trace import MI250, MULTI, input_bound_trace, write_trace


def _record(tmp_path: Path, name: str = "t.json", **kw):
    write_trace(tmp_path / name, input_bound_trace(**kw))
    (run,) = discover([tmp_path]).runs
    return load_trace_run(run)


def test_steps_and_data_wait_from_the_trace(tmp_path: Path) -> None:
    record = _record(tmp_path, steps=5, step_us=30_000.0, data_frac=1 / 3)
    assert len(record.timed_steps) == 5
    assert all(s.phase == "timed" for s in record.timed_steps)
    assert record.timed_steps[0].wall_ms == pytest.approx(30.0, abs=0.01)
    assert record.timed_steps[0].data_wait_ms == pytest.approx(10.0, abs=0.01)
    facts = derive_facts(record)
    assert facts.get("step_ms_p50") == pytest.approx(30.0, abs=0.01)
    assert facts.get("data_wait_frac") == pytest.approx(1 / 3, abs=0.01)
    assert facts.get("data_wait_ms_p50") == pytest.approx(10.0, abs=0.01)
    assert facts.get("step_timing_source") == "profiled_steps"
    assert facts.get("step_detection") == "profiler_step"
    # Single-process iterator: num_workers=0 is known; micro-batches are not.
    assert facts.get("dataloader_num_workers") == 0
    assert facts.get("dataloader_multiprocess") is False
    assert facts.get("micro_batches_per_step") is None
    assert facts.get("device_is_cuda") is True
    assert facts.get("gpu_compute_capability") == 8.0
    assert facts.get("gpu_vendor") == "nvidia"
    assert facts.get("device_total_memory_bytes") == 42_297_524_224
    assert facts.get("loss_is_finite") is None


def test_input_bound_is_the_root_cause(tmp_path: Path) -> None:
    facts = derive_facts(_record(tmp_path))
    findings = evaluate(facts).findings
    assert findings[0].rule_id == "input-bound"
    assert "launch-bound" not in [f.rule_id for f in findings]
    assert "num_workers=0" in findings[0].explanation


def test_multiprocess_loader_does_not_claim_zero_workers(tmp_path: Path) -> None:
    facts = derive_facts(_record(tmp_path, loader=MULTI))
    assert facts.get("dataloader_multiprocess") is True
    assert facts.get("dataloader_num_workers") is None
    top = evaluate(facts).findings[0]
    assert top.rule_id == "input-bound"
    assert "num_workers=0" not in top.explanation
    assert "worker processes" in top.explanation


def test_no_dataloader_spans_means_unknown_wait(tmp_path: Path) -> None:
    record = _record(tmp_path, loader=None)
    assert all(s.data_wait_ms is None for s in record.timed_steps)
    facts = derive_facts(record)
    assert facts.get("data_wait_frac") is None
    assert facts.get("dataloader_multiprocess") is None


def test_amd_gfx_is_not_a_compute_capability(tmp_path: Path) -> None:
    facts = derive_facts(_record(tmp_path, device=MI250))
    assert facts.get("gpu_vendor") == "amd"
    assert facts.get("gpu_compute_capability") is None
    assert facts.get("gpu_name") == "AMD Instinct MI250X"
    device, vendor = device_from_properties(({"id": 0, "name": "AMD Radeon Graphics"},), 0, True)
    assert vendor == "amd" and device is not None and device.compute_capability is None


def test_world_and_backend_from_distributed_info(tmp_path: Path) -> None:
    facts = derive_facts(_record(tmp_path, rank=3, world_size=8))
    assert facts.get("world_size") == 8
    assert facts.get("dist_backend") == "nccl"
    assert facts.get("ranks_launched") == 1


def test_two_ranks_straggler(tmp_path: Path) -> None:
    # Rank 1's DataLoader takes 6 ms longer per step: its own work is longer.
    write_trace(tmp_path / "job_rank-0.json", input_bound_trace(rank=0, data_frac=0.1))
    write_trace(
        tmp_path / "job_rank-1.json",
        input_bound_trace(rank=1, data_frac=0.1, extra_data_us=6_000.0),
    )
    (run,) = discover([tmp_path]).runs
    record = load_trace_run(run)
    assert [s.rank for s in record.rank_summaries] == [0, 1]
    assert [r.rank for r in record.ranks] == [1]
    slow = record.rank_summaries[1]
    assert slow.data_wait_ms_p50 == pytest.approx(9.0, abs=0.05)
    facts = derive_facts(record)
    assert facts.get("ranks_launched") == 2
    assert facts.get("straggler_rank") == 1
    assert facts.get("fastest_rank") == 0
    assert facts.get("straggler_excess_ms") == pytest.approx(6.0, abs=0.1)
    assert facts.get("straggler_data_wait_ms_p50") == pytest.approx(9.0, abs=0.05)
    ids = [f.rule_id for f in evaluate(facts).findings]
    assert "rank-straggler" in ids


def test_rank_from_distributed_info_wins_over_file_name(tmp_path: Path) -> None:
    write_trace(tmp_path / "w_rank0.json", input_bound_trace(rank=5))
    write_trace(tmp_path / "w_rank1.json", input_bound_trace(rank=4))
    (run,) = discover([tmp_path]).runs
    record = load_trace_run(run)
    assert [s.rank for s in record.rank_summaries] == [4, 5]
    assert [s.worker for s in record.rank_summaries] == ["w_rank1", "w_rank0"]


def test_rank_from_file_name_without_distributed_info(tmp_path: Path) -> None:
    write_trace(tmp_path / "a.7.pt.trace.json", input_bound_trace())
    write_trace(tmp_path / "b_rank2.9.pt.trace.json", input_bound_trace())
    (run,) = discover([tmp_path]).runs
    record = load_trace_run(run)
    assert [(s.rank, s.worker) for s in record.rank_summaries] == [(2, "b_rank2"), (None, "a")]


def test_trace_without_events_is_unusable(tmp_path: Path) -> None:
    write_trace(tmp_path / "empty.json", {"schemaVersion": 1, "traceEvents": []})
    (run,) = discover([tmp_path]).runs
    with pytest.raises(CorruptArtifact, match="no events"):
        load_trace_run(run)


def test_cpu_only_trace(tmp_path: Path) -> None:
    trace = input_bound_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["cat"] in ("user_annotation",)]
    trace["deviceProperties"] = []
    write_trace(tmp_path / "cpu.json", trace)
    (run,) = discover([tmp_path]).runs
    facts = derive_facts(load_trace_run(run))
    assert facts.get("device_is_cuda") is False
    assert facts.get("gpu_compute_capability") is None
