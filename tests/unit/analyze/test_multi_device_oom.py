"""A snapshot of three devices with history and a real OOM on device 1 (issue 32): the report
analysed device 1 without naming it, said nothing of devices 0 and 2, and called the fatal
OOM a retry that "stalls the step"."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

from perfdoctor.analyze.memory import load_memory
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render.markdown import render_markdown
from perfdoctor.render.memory_section import memory_section
from perfdoctor.rules import evaluate
from perfdoctor.rules.memory import ALLOCATOR_PRESSURE, RULES
from tests.unit.rules.factsets import make_facts

from .fixtures.make_snapshots import HISTORY, entry


def _device(index: int, history: list[dict[str, Any]], segment_size: int) -> tuple[dict, list]:
    seg = copy.deepcopy(HISTORY["segments"][0])
    seg["device"] = index
    seg["total_size"] = segment_size
    seg["blocks"][-1]["size"] = segment_size - 1536
    return seg, history


def three_devices() -> dict[str, Any]:
    """Devices 0 and 2 peak higher (8 MiB allocated) than device 1, whose history ends in
    an `oom` entry: the one to analyse is the one that failed."""
    big = [entry("segment_alloc", 1 << 30, 8 << 20, 100), entry("alloc", 1 << 30, 8 << 20, 200)]
    big.append(entry("free_completed", 1 << 30, 8 << 20, 300))
    big.append(entry("segment_free", 1 << 30, 8 << 20, 400))
    d0, t0 = _device(0, copy.deepcopy(big), 4096)
    d1, t1 = _device(1, copy.deepcopy(HISTORY["device_traces"][0]), 4096)
    d2, t2 = _device(2, copy.deepcopy(big), 4096)
    return {
        "segments": [d0, d1, d2],
        "device_traces": [t0, t1, t2],
        "allocator_settings": {"expandable_segments": False},
        # One device's stats (torch.cuda.memory_stats()): not every device's OOM count.
        "memory_stats": {"num_ooms": 1},
    }


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "oom_snapshot.pickle"
    path.write_bytes(pickle.dumps(three_devices(), protocol=4))
    return path


def test_the_device_that_ran_out_is_analysed_and_the_others_summarised(tmp_path: Path) -> None:
    summary = load_memory(_write(tmp_path))
    assert summary.device == 1 and summary.oom_events == 1
    assert summary.oom_request_bytes == 99999
    assert [(o.device, o.oom_events) for o in summary.other_devices] == [(0, 0), (2, 0)]
    assert all(o.peak_allocated_bytes >= 8 << 20 for o in summary.other_devices)


def test_the_report_names_the_device_calls_the_oom_fatal_and_covers_the_others(
    tmp_path: Path,
) -> None:
    (done,) = diagnose_traces([_write(tmp_path)], tmp_path / "out")
    report = done.report
    assert report is not None
    (finding,) = [f for f in report.findings if f.rule_id == ALLOCATOR_PRESSURE]
    assert finding.severity == "critical"
    assert "time(s) on device 1" in finding.title
    assert "fatal" in finding.explanation and "stalls the step" not in finding.explanation
    assert "device 0:" in finding.explanation and "device 2:" in finding.explanation
    section = memory_section(report)
    assert section is not None
    rows = dict(section.figures)
    assert rows["device"].startswith("1 (of 3")
    assert "no out-of-memory" in rows["device 0"] and "no out-of-memory" in rows["device 2"]
    text = str(render_markdown(report))
    assert "device 2" in text


def test_a_retry_without_an_oom_still_reads_as_a_stall() -> None:
    rule = next(r for r in RULES if r.id == ALLOCATOR_PRESSURE)
    facts = make_facts("gpu", oom_events=0, alloc_retries=3)
    (finding,) = evaluate(facts, rules=(rule,)).findings
    assert "stalls the step" in finding.explanation and "fatal" not in finding.explanation
