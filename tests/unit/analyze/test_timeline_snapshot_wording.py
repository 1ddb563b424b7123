"""Part 8 of issue 22: snapshot wording. A real out-of-memory (an `oom` entry) with its failed
request versus an allocator retry; the state at the snapshot versus a peak; cached free
memory versus fragmentation."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.memory import load_memory
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report
from perfdoctor.render import memory_section, summary

from .gpu_corpus import corpus_dir

MIB = 1024**2


def _segment(address: int, live: int, free: int) -> dict[str, Any]:
    return {
        "device": 0,
        "address": address,
        "total_size": live + free,
        "stream": 0,
        "segment_type": "large",
        "blocks": [
            {"address": address, "size": live, "requested_size": live, "state": "active_allocated"},
            {"address": address + live, "size": free, "requested_size": 0, "state": "inactive"},
        ],
    }


def _snapshot(
    tmp_path: Path, *, oom_request: int | None, history: bool = True, name: str = "s.pickle"
) -> Path:
    """Two 4 MiB segments, each with 2 MiB live and 2 MiB free: 4 MiB free in the cache, no
    free block larger than 2 MiB."""
    segments = [_segment(0, 2 * MIB, 2 * MIB), _segment(64 * MIB, 2 * MIB, 2 * MIB)]
    traces: list[dict[str, Any]] = []
    if history:
        traces = [
            {"action": "segment_alloc", "addr": 0, "size": 4 * MIB, "stream": 0, "time_us": 1},
            {"action": "alloc", "addr": 0, "size": 2 * MIB, "stream": 0, "time_us": 2},
            {
                "action": "segment_alloc",
                "addr": 64 * MIB,
                "size": 4 * MIB,
                "stream": 0,
                "time_us": 3,
            },
            {"action": "alloc", "addr": 64 * MIB, "size": 2 * MIB, "stream": 0, "time_us": 4},
        ]
        if oom_request is not None:
            traces.append(
                {
                    "action": "oom",
                    "addr": 0,
                    "size": oom_request,
                    "stream": 0,
                    "time_us": 5,
                    "device_free": 95 * MIB,
                }
            )
    data = {"segments": segments, "device_traces": [traces], "allocator_settings": {}}
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return path


def _report(tmp_path: Path, path: Path) -> Report:
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    return done.report


def _figures(report: Report) -> dict[str, str]:
    section = memory_section.memory_section(report)
    assert section is not None
    return dict(section.figures)


def test_a_real_oom_shows_the_failed_request_and_free_memory(tmp_path: Path) -> None:
    path = _snapshot(tmp_path, oom_request=3 * MIB)
    m = load_memory(path)
    assert m.oom_request_bytes == 3 * MIB and m.oom_device_free_bytes == 95 * MIB
    report = _report(tmp_path, path)
    assert report.facts["oom_request_bytes"] == 3 * MIB
    figures = _figures(report)
    assert "a request of 3" in figures["out of memory"]
    assert "95" in figures["out of memory"]
    (oom,) = [f for f in report.findings if f.rule_id == "allocator-retries"]
    assert "ran out of memory" in oom.title and "a request of 3" in oom.title
    assert "retry" not in oom.title


def test_free_blocks_that_add_up_but_cannot_hold_the_request_are_fragmentation(
    tmp_path: Path,
) -> None:
    # 3 MiB fits the 4 MiB free in total but no 2 MiB block: fragmentation.
    report = _report(tmp_path, _snapshot(tmp_path, oom_request=3 * MIB))
    assert report.facts["memory_cache_fragmented"] is True
    assert "fragmented" in _figures(report)["free in the cache at the snapshot"]


def test_a_request_larger_than_all_free_memory_is_not_fragmentation(tmp_path: Path) -> None:
    # A 5.3 GB request against 4 MiB of free cache: a real OOM, the cache merely cached.
    report = _report(tmp_path, _snapshot(tmp_path, oom_request=5_300 * MIB))
    assert report.facts["memory_cache_fragmented"] is False
    free_row = _figures(report)["free in the cache at the snapshot"]
    assert "cached, reusable" in free_row and "fragmented" not in free_row
    assert not [f for f in report.findings if f.rule_id == "memory-fragmentation"]


def test_a_snapshot_without_history_is_the_state_at_the_snapshot(tmp_path: Path) -> None:
    report = _report(tmp_path, _snapshot(tmp_path, oom_request=None, history=False))
    figures = _figures(report)
    assert "allocated at the snapshot (no history)" in figures
    assert "peak allocated" not in figures
    assert "reserved, not allocated, at the snapshot" in figures
    assert "out of memory" not in figures
    rows = dict(summary._trace_step_rows(report))
    assert "fragmentation" not in rows
    assert rows["cached, not allocated"].endswith("at the snapshot")
    assert "memory at the snapshot" in rows


def test_corpus_snapshots_have_history_and_no_oom(tmp_path: Path) -> None:
    root = corpus_dir()
    path = None if root is None else root / "snapshots" / "cs336_ctx128_fullstep.pickle"
    if path is None or not path.is_file():
        pytest.skip("shared GPU corpus not found")
    report = _report(tmp_path, path)
    figures = _figures(report)
    assert "peak allocated" in figures and "out of memory" not in figures
    assert "cached, reusable" in figures["free in the cache at the snapshot"]
    assert report.facts["memory_cache_fragmented"] is None


def test_the_headline_of_a_snapshot_without_history_names_no_peak(tmp_path: Path) -> None:
    report = _report(tmp_path, _snapshot(tmp_path, oom_request=None, history=False))
    slow = summary.headline(report).slow
    assert slow.startswith("At the snapshot (no allocator history, so no peak)")
    assert "Peak" not in slow
