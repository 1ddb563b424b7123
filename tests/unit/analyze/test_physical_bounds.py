"""Impossible numbers (issue 31): a value no hardware can produce is invalid input, named in a
warning and never computed with; and every number a report shows lies in its physical range.

The hostile traces are written here by hand (the same single changes as the shared
reliability cases, which are checked too where they are present): a collective's group size
of -8, a message size of "²", 1e308 or 10**30 elements, GEMM shapes of 1e12 x 1e12, a negative
computeMinor, ProfilerStep spans of no duration."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perfdoctor.analyze.trace import load_trace
from perfdoctor.cli import app
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render.json_report import report_to_dict

from .comm_traces import collective_trace, sized
from .gemm_trace import MM, gemm_trace
from .gpu_corpus import REPO, corpus_dir, corpus_traces

NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
# The most any GPU link carries per direction, generously (comm_bandwidth.BUSBW_CEILING_GBS).
BANDWIDTH_MAX_GBS = 10_000.0
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "runs"


def _numbers(doc: Any, path: str = "") -> Iterator[tuple[str, str, float]]:
    """(path, key, value) of every number in a report document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield f"{path}.{key}", str(key), float(value)
            else:
                yield from _numbers(value, f"{path}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _numbers(value, f"{path}[{i}]")


def physical_violations(doc: Any) -> list[str]:
    """Every number of a report beyond its physical range, by its key's unit: a fraction or
    share in [0, 1], a percentage within +-100 (a share) or >= -100 (a change), an MFU in
    [0, 1], a bandwidth in [0, BANDWIDTH_MAX_GBS] GB/s; and nothing infinite or NaN."""
    found = []
    for path, key, value in _numbers(doc):
        k = key.lower()
        bad = not math.isfinite(value)
        if (k.endswith(("_frac", "_share")) or k in ("frac", "share", "mfu")) and not (
            -1e-9 <= value <= 1 + 1e-9
        ):
            bad = True
        if (
            k.startswith("mfu")
            and not k.endswith(("tflops", "missing"))
            and not (0 <= value <= 1 + 1e-9)
        ):
            bad = True
        if ("gbs" in k or "bandwidth" in k) and not (0 <= value <= BANDWIDTH_MAX_GBS):
            bad = True
        if k.endswith(("_pct", "percent")) and value < -100:
            bad = True
        if bad:
            found.append(f"{path} = {value!r}")
    return found


def _write(path: Path, trace: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def _comm(args: dict[str, Any]) -> dict[str, Any]:
    return collective_trace([{"name": NCCL_AR, "dur": 50.0, "args": args, "host_args": args}])


def _hostile_traces() -> dict[str, dict[str, Any]]:
    mm = ("aten::mm", [[10**12, 10**12], [10**12, 10**12]], ["float", "float"], MM, 80.0)
    negative_minor = gemm_trace([("aten::mm", [[64, 64], [64, 64]], ["float", "float"], MM, 5.0)])
    negative_minor["deviceProperties"][0]["computeMinor"] = -1
    zero_steps = _comm(sized("allreduce", 1024))
    for ev in zero_steps["traceEvents"]:
        if ev["name"].startswith("ProfilerStep#"):
            ev["dur"] = 0
    return {
        "group_size_negative": _comm(sized("allreduce", 1024, group=-8)),
        "nelems_superscript_two": _comm(
            {**sized("allreduce", 1), "In msg nelems": "²", "Out msg nelems": "²"}
        ),
        "nelems_1e308": _comm(
            {**sized("allreduce", 1), "In msg nelems": 1e308, "Out msg nelems": 1e308}
        ),
        "nelems_1e30": _comm(sized("allreduce", 10**30)),
        "mm_1e12": gemm_trace([mm]),
        "compute_minor_negative": negative_minor,
        "profiler_steps_zero_length": zero_steps,
    }


# The warning each change must give (None: the value is simply absent, no warning needed).
_WARNS = {
    "group_size_negative": "invalid input",
    "nelems_superscript_two": "invalid input",
    "nelems_1e308": "invalid input",
    "nelems_1e30": "invalid input",
    "mm_1e12": "invalid input",
    "compute_minor_negative": None,
    "profiler_steps_zero_length": "no ProfilerStep",
}


@pytest.mark.parametrize("case", sorted(_WARNS))
def test_impossible_values_are_named_and_not_computed_with(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path / "in" / f"{case}.pt.trace.json.gz", _hostile_traces()[case])
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None, done.error
    doc = report_to_dict(done.report)
    assert physical_violations(doc) == []
    want = _WARNS[case]
    if want is not None:
        assert any(want in w for w in done.report.warnings), done.report.warnings
    summary = load_trace(path)
    if case.startswith("nelems"):
        assert summary.comm is not None
        assert all(k.bytes_total is None for k in summary.comm.kinds)
    if case == "group_size_negative":  # the group ignored: the job's world size stands
        assert summary.comm is not None and summary.comm.group_size == 8
    if case == "compute_minor_negative":
        assert doc["facts"].get("gpu_compute_capability") in (None, 9.0)
    if case == "mm_1e12":
        assert not (doc["facts"].get("mfu_frac") or 0) > 1


def test_a_plausible_size_still_gives_its_bandwidth(tmp_path: Path) -> None:
    summary = load_trace(
        _write(tmp_path / "ok.pt.trace.json.gz", _comm(sized("allreduce", 1 << 20)))
    )
    assert summary.comm is not None and summary.comm.kinds[0].bytes_total == 4 << 20
    assert summary.comm.impossible_sizes == 0


def test_an_impossibly_fast_collective_drops_its_size(tmp_path: Path) -> None:
    # 2**38 floats (1 TiB) in 50 µs: 4e7 GB/s, beyond any link; the size stays within range.
    summary = load_trace(
        _write(tmp_path / "fast.pt.trace.json.gz", _comm(sized("allreduce", 1 << 38)))
    )
    assert summary.comm is not None and summary.comm.impossible_sizes == 1
    assert summary.comm.kinds[0].bytes_total is None
    assert any("no link could move" in n for n in summary.notes)


def test_the_checker_catches_what_it_is_for() -> None:
    doc = {"a": {"mfu_frac": 1.1e26, "x_share": 0.5}, "b": [{"busbw_gbs_p50": 1.6e24}]}
    assert physical_violations(doc) == [".a.mfu_frac = 1.1e+26", ".b[0].busbw_gbs_p50 = 1.6e+24"]


def _reliability_cases() -> list[Path]:
    root = corpus_dir()
    cases = root.parent / "reliability-cases" if root is not None else None
    return sorted(cases.glob("*.gz")) if cases is not None and cases.is_dir() else []


@pytest.mark.skipif(not _reliability_cases(), reason="the shared reliability cases are absent")
@pytest.mark.parametrize("path", _reliability_cases(), ids=lambda p: p.name.split(".")[0])
def test_reliability_cases_give_a_report_or_one_line(tmp_path: Path, path: Path) -> None:
    result = CliRunner().invoke(app, ["diagnose", str(path), "-o", str(tmp_path / "out")])
    if re.match(r"m02[12]-", path.name):  # deeply nested JSON: corrupt, in one line
        assert result.exit_code == 68, result.output
        assert result.output.count("perfdoctor: error:") == 1
        return
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert physical_violations(doc) == []


@pytest.mark.parametrize("run", sorted(p.name for p in FIXTURE_RUNS.iterdir() if p.is_dir()))
def test_fixture_run_reports_are_within_physical_ranges(tmp_path: Path, run: str) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app, ["report", str(FIXTURE_RUNS / run), "-f", "json", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert physical_violations(json.loads(out.read_text())) == []


def _small_corpus_traces() -> list[Path]:
    # The small ones: a diagnosis each in about a second. The whole corpus (24 traces) was
    # checked once by hand, with no number out of range (issue 31's note).
    return [p for p in corpus_traces() if p.stat().st_size < 128 << 10]


@pytest.mark.skipif(not _small_corpus_traces(), reason="the shared GPU corpus is absent")
@pytest.mark.parametrize("path", _small_corpus_traces(), ids=lambda p: p.name[:40])
def test_corpus_trace_reports_are_within_physical_ranges(tmp_path: Path, path: Path) -> None:
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None, done.error
    assert physical_violations(report_to_dict(done.report)) == []
