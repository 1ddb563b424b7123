"""A collector that fails never fails the run, so its failure must be said in the manifest's
warnings (which the reports show): otherwise the report reads complete."""

from __future__ import annotations

import json
from pathlib import Path

from perfdoctor.collect.manifest import collector_failures
from perfdoctor.model import RunSpec, Target


def _spec(run_dir: Path, profile: bool = True) -> RunSpec:
    return RunSpec(
        label="baseline",
        target=Target(kind="script", name="train.py", argv=()),
        cwd=str(run_dir),
        run_dir=str(run_dir),
        profile=profile,
    )


def test_a_failed_profiler_is_a_warning(tmp_path: Path) -> None:
    obs = {"profiler": {"error": "profiler.step() failed: RuntimeError: error unpacking string"}}
    warnings = collector_failures(_spec(tmp_path), obs, tmp_path, "completed")
    assert warnings == [
        "profiler failed: profiler.step() failed: RuntimeError: error unpacking string "
        "(no profiler trace for this run: the rules that need one are skipped)"
    ]


def test_a_failed_memory_history_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "x.pt.trace.json.gz").write_bytes(b"")
    obs = {"memory_history": {"error": "snapshot failed (end): RuntimeError: no"}}
    (warning,) = collector_failures(_spec(tmp_path), obs, tmp_path, "completed")
    assert warning.startswith("memory_history failed: snapshot failed (end): RuntimeError: no")


def test_a_missing_trace_is_a_warning_only_when_one_was_asked_for(tmp_path: Path) -> None:
    obs = {"profiler": {"user_profiler": False}}
    (warning,) = collector_failures(_spec(tmp_path), obs, tmp_path, "completed")
    assert "wrote no trace" in warning
    assert collector_failures(_spec(tmp_path, profile=False), obs, tmp_path, "completed") == []
    # A crash before the window is said by the crash itself.
    assert collector_failures(_spec(tmp_path), obs, tmp_path, "script_crashed") == []


def test_a_sampler_that_stopped_is_a_warning_but_no_nvml_on_a_cpu_machine_is_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "x.pt.trace.json.gz").write_bytes(b"")
    rows = [
        {"kind": "note", "t": 0.0, "message": "NVML unavailable: NVMLError_LibraryNotFound"},
        {"kind": "cpu", "t": 0.1, "cpu_percent": [50.0]},
        {"kind": "note", "t": 3.0, "message": "cpu sampler stopped"},
    ]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    warnings = collector_failures(_spec(tmp_path), {}, tmp_path, "completed")
    assert warnings == ["cpu sampler stopped: the device samples of this run are incomplete"]


def test_a_clean_run_has_no_collector_warning(tmp_path: Path) -> None:
    (tmp_path / "x.pt.trace.json.gz").write_bytes(b"")
    obs = {"profiler": {"user_profiler": False, "error": None}, "memory_history": {}}
    assert collector_failures(_spec(tmp_path), obs, tmp_path, "completed") == []
