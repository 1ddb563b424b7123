"""Memory snapshots: the restricted unpickler, and the replay of snapshot_history.pickle.

That history (fixtures/make_snapshots.py) starts with a parameter block (1024 bytes, 1000
requested) that predates it and ends with two live blocks (1000 + 500 requested bytes) in a
4096-byte segment. Allocated bytes count requested sizes, as PyTorch's memory viewer does:
1000 live before the history, then 1512 -> 5608 -> 7656 -> 8680 (peak, at entry 4) and back
to 1512; a second 8192-byte segment lives from entry 1 to entry 9, so reserved is 12288 at
the peak.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from perfdoctor.analyze.memory import (
    MAX_TIMELINE_POINTS,
    SNAPSHOT_FACTS,
    MemorySummary,
    analyze_snapshot,
    load_memory,
    load_snapshot,
    memory_series,
    snapshot_facts,
    summarize_snapshot,
)
from perfdoctor.errors import CorruptArtifact, UntrustedPickle

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def history() -> MemorySummary:
    return load_memory(FIXTURES / "snapshot_history.pickle", max_entries=100_000)


def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UntrustedPickle) as err:
        load_snapshot(FIXTURES / "snapshot_malicious.pickle")
    assert "system" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "perfdoctor_pwned.txt").exists()


def test_any_class_is_refused_even_a_harmless_one(tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "when": frozenset({1})}, protocol=2))
    with pytest.raises(UntrustedPickle, match="frozenset"):
        load_snapshot(path)


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps([1, 2, 3])])
def test_corrupt_or_foreign_pickles(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(content)
    with pytest.raises(CorruptArtifact, match=r"snap\.pickle"):
        load_snapshot(path)


def test_peaks_and_fragmentation(history: MemorySummary) -> None:
    assert history.peak_allocated_bytes == 8680
    assert history.peak_reserved_bytes == 12288
    assert history.reserved_at_peak_bytes == 12288
    assert history.fragmentation_frac == pytest.approx((12288 - 8680) / 12288)
    assert history.final_allocated_bytes == 1500 and history.final_reserved_bytes == 4096
    assert history.oom_events == 1
    assert history.alloc_retries is None
    assert history.history_entries == 11 and not history.history_truncated


def test_timeline(history: MemorySummary) -> None:
    assert history.timeline_allocated_bytes[:5] == (1512, 1512, 5608, 7656, 8680)
    assert history.timeline_peak_index == 4
    assert history.timeline_t_s[4] == pytest.approx(0.0004)


def test_top_sites_at_the_peak_are_the_users_lines(history: MemorySummary) -> None:
    sites = [(s.location.file, s.location.line, s.bytes) for s in history.top_sites]
    # No user roots given: shown from the directory above the sites' common directory.
    assert sites == [
        ("proj/model.py", 12, 4096),
        ("proj/model.py", 14, 2048),
        ("proj/train.py", 55, 512),
    ]
    assert history.top_sites[0].location.share == pytest.approx(4096 / 8680)


def test_sites_under_the_user_roots_are_shown_relative_to_them() -> None:
    summary = load_memory(FIXTURES / "snapshot_history.pickle", user_roots=["/home/user/proj"])
    assert [s.location.file for s in summary.top_sites] == ["model.py", "model.py", "train.py"]


def test_split_by_what_the_memory_holds(history: MemorySummary) -> None:
    assert history.categories_at_peak == {
        "parameters": 0,
        "gradients": 1024,  # allocated with no Python stack: the backward thread
        "optimizer_state": 512,
        "activations": 6144,
        "autocast_copies": 0,
        "other": 0,
        "unknown": 1000,  # allocated before the history: no stack to tell
    }
    assert history.activation_bytes_frac == pytest.approx(6144 / 8680)


def test_truncated_history_is_reported() -> None:
    summary = load_memory(FIXTURES / "snapshot_history.pickle", max_entries=11)
    assert summary.history_truncated
    assert any("limit" in n for n in summary.notes)


def test_segments_only_snapshot_falls_back_to_the_final_state() -> None:
    summary = load_memory(FIXTURES / "snapshot_segments_only.pickle")
    assert summary.peak_allocated_bytes == 1 << 20
    assert summary.peak_reserved_bytes == 2 << 20
    assert summary.fragmentation_frac == pytest.approx(0.5)
    assert summary.timeline_allocated_bytes == () and summary.timeline_peak_index is None
    assert summary.categories_at_peak == {}  # no stacks: no split


def test_long_histories_are_downsampled_keeping_the_peak() -> None:
    n = 5 * MAX_TIMELINE_POINTS
    entries = [
        {
            "action": "alloc" if i % 2 == 0 else "free_completed",
            "addr": i // 2,
            "size": 10,
            "time_us": i,
        }
        for i in range(n)
    ]
    entries[1000] = {"action": "alloc", "addr": 10**9, "size": 10**6, "time_us": 1000}
    entries[1001] = {"action": "free_completed", "addr": 10**9, "size": 10**6, "time_us": 1001}
    data = {
        "segments": [{"device": 0, "total_size": 2 * 10**6, "blocks": []}],
        "device_traces": [entries],
    }
    summary = summarize_snapshot(data)
    assert len(summary.timeline_allocated_bytes) == MAX_TIMELINE_POINTS
    assert max(summary.timeline_allocated_bytes) == summary.peak_allocated_bytes
    peak = summary.timeline_peak_index
    assert (
        peak is not None and summary.timeline_allocated_bytes[peak] == summary.peak_allocated_bytes
    )


@pytest.mark.parametrize(
    "opcodes",
    [
        b"\x80\x04\x8e" + (1 << 62).to_bytes(8, "little") + b"abc",  # BINBYTES8
        b"\x80\x05\x96" + (1 << 62).to_bytes(8, "little") + b"abc",  # BYTEARRAY8
        b"\x80\x04\x8d" + (1 << 62).to_bytes(8, "little") + b"abc",  # BINUNICODE8
        b"\x80\x04\x95" + (1 << 62).to_bytes(8, "little") + b"}.",  # FRAME
        b"\x80\x04" + b"(" * 100_000 + b".",  # marks and nothing else
    ],
)
def test_a_pickle_claiming_a_huge_object_is_corrupt_not_a_memory_error(
    tmp_path: Path, opcodes: bytes
) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(opcodes)
    with pytest.raises(CorruptArtifact) as err:
        load_snapshot(path)
    assert "\n" not in str(err.value)


def test_fragmentation_at_the_snapshot_from_the_blocks(history: MemorySummary) -> None:
    # One 4096-byte segment: 1000 + 500 bytes requested in blocks of 1024 + 512, one free
    # 2560-byte block.
    assert history.free_bytes == 4096 - 1500
    assert history.free_internal_bytes == 24 + 12
    assert history.largest_free_block_bytes == 2560
    assert history.largest_free_block_frac == pytest.approx(1.0)
    assert history.segments == 1 and history.expandable_segments is False


def test_reserved_timeline_and_sites_over_the_whole_history(history: MemorySummary) -> None:
    assert history.timeline_reserved_bytes[:3] == (4096, 12288, 12288)
    assert history.timeline_reserved_bytes[-1] == 4096  # segment_free at entry 9
    assert history.allocated_in_history_bytes == 512 + 4096 + 2048 + 1024
    overall = [(s.location.file, s.location.line, s.blocks) for s in history.top_sites_overall]
    assert overall[0] == ("proj/model.py", 12, 1)
    assert history.peak_time_s == pytest.approx(0.0004)


def _entry(action: str, addr: int, size: int, t: int, frames: list) -> dict:
    return {"action": action, "addr": addr, "size": size, "time_us": t, "frames": frames}


def test_site_is_the_innermost_frame_outside_libraries_without_user_roots() -> None:
    frames = [
        {"filename": "CUDACachingAllocator.cpp", "line": 0, "name": "malloc"},
        {
            "filename": "/opt/env/lib/python3.12/site-packages/torch/nn/functional.py",
            "line": 9,
            "name": "linear",
        },
        {"filename": "/usr/lib/python3.12/contextlib.py", "line": 81, "name": "inner"},
        {"filename": "/srv/job/src/torch_utils/layers.py", "line": 7, "name": "forward"},
        {"filename": "/srv/job/train.py", "line": 40, "name": "main"},
    ]
    data = {
        "segments": [{"device": 0, "address": 0, "total_size": 4096, "blocks": []}],
        "device_traces": [[_entry("alloc", 0, 4096, 1, frames)]],
    }
    summary = summarize_snapshot(data)
    site = summary.top_sites[0].location
    assert (site.file, site.line, site.function) == ("torch_utils/layers.py", 7, "forward")


def test_peak_inside_an_annotation_is_named() -> None:
    data = {
        "segments": [{"device": 0, "address": 0, "total_size": 4096, "blocks": []}],
        "device_traces": [
            [_entry("alloc", 0, 1024, 10, []), _entry("free_completed", 0, 1024, 30, [])]
        ],
        "external_annotations": [
            {"stage": "START", "name": "Optimizer.step#SGD.step", "device": 0, "time_us": 5},
            {"stage": "END", "name": "Optimizer.step#SGD.step", "device": 0, "time_us": 20},
        ],
    }
    assert summarize_snapshot(data).peak_during == "Optimizer.step"


def test_facts_and_series_of_a_snapshot_alone(history: MemorySummary) -> None:
    facts = snapshot_facts(history, device_total=16384)
    assert set(facts) == set(SNAPSHOT_FACTS)
    assert facts["peak_allocated_frac"] == pytest.approx(8680 / 16384)
    assert facts["optimizer_state_bytes_frac"] == pytest.approx(512 / 8680)
    assert facts["expandable_segments"] is False
    assert snapshot_facts(history)["peak_allocated_frac"] is None  # device size unknown
    series = memory_series(history)
    assert series["allocated_bytes"][series["peak_index"]] == 8680
    assert len(series["reserved_bytes"]) == len(series["t_s"])
    summary = series["summary"]
    assert summary["top_sites"][0] == {
        "file": "proj/model.py",
        "line": 12,
        "function": "forward",
        "bytes": 4096,
        "blocks": 1,
        "share": pytest.approx(4096 / 8680),
    }
    assert summary["categories_at_peak"]["unknown"] == 1000
    assert memory_series(None)["peak_index"] is None


_ODD_VALUES = (
    None,
    "x",
    -1,
    2**70,
    10**400,
    float("nan"),
    float("inf"),
    [],
    {},
    [1, 2],
    {"a": 1},
    True,
    b"\xff",
    -(2**63) - 1,
)


def _paths(obj: object, path: tuple = ()) -> list[tuple]:
    out = [path] if path else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*path, i))
    return out


def test_bounded_fuzz_odd_values_give_a_summary_or_corrupt_artifact(tmp_path: Path) -> None:
    """Any value of the fixture swapped for an odd one (wrong type, NaN, beyond int64,
    unhashable address): a summary, or CorruptArtifact -- never another exception."""
    import copy
    import random

    base = pickle.loads((FIXTURES / "snapshot_history.pickle").read_bytes())
    paths = _paths(base)
    rng = random.Random(11)
    path = tmp_path / "snap.pickle"
    summarized = 0
    for _ in range(300):
        data = copy.deepcopy(base)
        for _ in range(rng.randint(1, 3)):
            *parents, last = rng.choice(paths)
            node = data
            try:
                for p in parents:
                    node = node[p]
                node[last] = rng.choice(_ODD_VALUES)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier swap replaced a parent
        path.write_bytes(pickle.dumps(data))
        try:
            load_memory(path)
            summarized += 1
        except CorruptArtifact as err:
            assert "\n" not in str(err)
    assert summarized > 250  # odd values are read as "not measured", not refused wholesale


def test_analyze_snapshot_gives_what_a_report_needs() -> None:
    analysis = analyze_snapshot(FIXTURES / "snapshot_history.pickle", device_total=16384)
    assert analysis.summary.peak_allocated_bytes == 8680
    assert analysis.facts["device_is_cuda"] is True
    assert analysis.facts["device_total_memory_bytes"] == 16384
    assert analysis.facts["peak_allocated_frac"] == pytest.approx(8680 / 16384)
    assert [loc.line for loc in analysis.locations["memory_peak"]] == [12, 14, 55]
    assert analysis.series["summary"]["peak_allocated_bytes"] == 8680
    alone = analyze_snapshot(FIXTURES / "snapshot_history.pickle")
    assert "device_total_memory_bytes" not in alone.facts
    assert alone.facts["peak_allocated_frac"] is None
