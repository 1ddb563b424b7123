"""Finding traces and snapshots under `perfdoctor diagnose` paths, grouped into runs/ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfdoctor.analyze.trace_inputs import discover, looks_like_trace, rank_from_name
from perfdoctor.errors import CorruptArtifact, TargetNotFound

from .synthetic_trace import input_bound_trace, write_trace


def _trace(path: Path, **kw) -> Path:
    return write_trace(path, input_bound_trace(steps=2, kernels_per_step=2, **kw))


def test_handler_logdir_runs_workers_and_windows(tmp_path: Path) -> None:
    # <logdir>/<run>/<worker>.<ts>.pt.trace.json[.gz], two runs, two workers, two windows.
    _trace(tmp_path / "baseline" / "host_11.100.pt.trace.json.gz")
    _trace(tmp_path / "baseline" / "host_11.200.pt.trace.json.gz")
    _trace(tmp_path / "baseline" / "host_12.150.pt.trace.json")
    _trace(tmp_path / "amp" / "host_21.300.pt.trace.json.gz")
    found = discover([tmp_path])
    by_name = {r.name: r for r in found.runs}
    assert set(by_name) == {"baseline", "amp"}
    base = by_name["baseline"]
    assert [r.worker for r in base.ranks] == ["host_11", "host_12"]
    first = base.ranks[0]
    assert first.trace.name == "host_11.200.pt.trace.json.gz"  # the newest window
    assert first.windows == 2
    assert any("2 profiler windows" in n for n in found.notes)
    assert len(by_name["amp"].ranks) == 1


def test_free_names_with_rank_are_one_run(tmp_path: Path) -> None:
    _trace(tmp_path / "job_rank-0.json.gz")
    _trace(tmp_path / "job_rank-1.json.gz")
    _trace(tmp_path / "other.json")
    found = discover([tmp_path])
    names = sorted(r.name for r in found.runs)
    assert names == ["job_ranks", "other"]
    job = next(r for r in found.runs if r.name == "job_ranks")
    assert [r.rank_from_name for r in job.ranks] == [0, 1]


def test_explicit_files_group_like_a_directory(tmp_path: Path) -> None:
    a = _trace(tmp_path / "x_rank0.json")
    b = _trace(tmp_path / "x_rank1.json")
    found = discover([b, a])
    assert len(found.runs) == 1
    assert [r.rank_from_name for r in found.runs[0].ranks] == [0, 1]


def test_rank_from_name() -> None:
    assert rank_from_name("trace_rank-3") == 3
    assert rank_from_name("RANK_12.Jul_15.pt") == 12
    assert rank_from_name("host_1234") is None
    assert rank_from_name("cranky7") is None


def test_non_trace_json_is_skipped_in_a_directory(tmp_path: Path) -> None:
    _trace(tmp_path / "t.json")
    (tmp_path / "report.json").write_text(json.dumps({"schema_version": 3, "findings": []}))
    found = discover([tmp_path])
    assert [r.name for r in found.runs] == ["t"]
    assert [p.name for p in found.skipped] == ["report.json"]
    assert any("not profiler traces" in n for n in found.notes)
    assert not looks_like_trace(tmp_path / "report.json")


def test_named_non_trace_file_is_corrupt(tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(CorruptArtifact, match=r"not a torch\.profiler"):
        discover([bad])
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(CorruptArtifact, match="neither a profiler trace"):
        discover([text])


def test_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(TargetNotFound, match="does not exist"):
        discover([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TargetNotFound, match="no trace or snapshot found in"):
        discover([tmp_path / "empty"])


def test_snapshot_beside_one_run_joins_it(tmp_path: Path) -> None:
    _trace(tmp_path / "run" / "w.1.pt.trace.json.gz")
    (tmp_path / "run" / "memory_snapshot.pickle").write_bytes(b"\x80\x04N.")
    (tmp_path / "snaps").mkdir()
    (tmp_path / "snaps" / "a.pickle").write_bytes(b"\x80\x04N.")
    (tmp_path / "snaps" / "b.pkl").write_bytes(b"\x80\x04N.")
    found = discover([tmp_path])
    by_name = {r.name: r for r in found.runs}
    assert by_name["run"].snapshot is not None
    assert by_name["a"].snapshot is not None and not by_name["a"].ranks
    assert by_name["b"].snapshot is not None


def test_own_output_directory_is_not_read(tmp_path: Path) -> None:
    _trace(tmp_path / "t.json")
    _trace(tmp_path / "perfdoctor-diagnose" / "old" / "copy.json")
    found = discover([tmp_path])
    assert [r.name for r in found.runs] == ["t"]
