"""`perfdoctor diagnose` end to end: corpus traces, a logdir, exit codes, read-only.

The command runs in this process (typer's CliRunner, stdout and stderr apart) where a test
checks what it prints and writes: a `python -m perfdoctor` process costs a second of imports
each. Real processes remain where the process itself is the point: the default output
directory in the working directory, stdout/stderr separation, and an exit code of each kind.

Corpus tests skip when the GPU corpus is absent (`<repo>/../shared/gpu-corpus`, or the
directory named by PERFDOCTOR_GPU_CORPUS); corpus files are only linked into tmp_path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_in_process
from load_limits import scaled

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("PERFDOCTOR_GPU_CORPUS") or REPO.parent / "shared" / "gpu-corpus")
TRACES = CORPUS / "traces"
SNAPSHOTS = CORPUS / "snapshots"
needs_corpus = pytest.mark.skipif(not TRACES.is_dir(), reason="GPU corpus not present")

_SPEC = importlib.util.spec_from_file_location(
    "synthetic_trace", REPO / "tests" / "unit" / "analyze" / "synthetic_trace.py"
)
assert _SPEC is not None and _SPEC.loader is not None
synthetic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(synthetic)

pytestmark = pytest.mark.integration


ENV = {"NO_COLOR": "1", "COLUMNS": "100"}


def diagnose(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real `python -m perfdoctor diagnose` process."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **ENV}
    return subprocess.run(
        [sys.executable, "-m", "perfdoctor", "diagnose", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )


def diagnose_here(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The same command in this process."""
    return run_in_process("diagnose", *args, env=ENV)


def _listing(root: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (str(p.relative_to(root)), p.lstat().st_mtime_ns, p.lstat().st_size)
        for p in root.rglob("*")
    )


def _corpus_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*") if p.name.endswith(suffixes))


@needs_corpus
@pytest.mark.parametrize(
    "trace", _corpus_files(TRACES, (".json", ".json.gz")), ids=lambda p: p.name
)
def test_every_corpus_trace_is_diagnosed(trace: Path, tmp_path: Path) -> None:
    result = diagnose_here(trace, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # Shares of a step or of the GPU window never exceed it (issue 11: "164% of the step").
    shares = {k: v for k, v in report["facts"].items() if k.endswith("_frac") and v is not None}
    assert all(0.0 <= v <= 1.0 + 1e-9 for v in shares.values()), shares
    # No corpus trace has the dispatch gaps of tiny kernels: dependency waits are not them.
    assert "tiny-kernels" not in {f["rule_id"] for f in report["findings"]}
    assert report["source"] == "trace"
    assert report["inputs"] == [str(trace)]
    assert (tmp_path / "out" / "report.html").is_file()


@needs_corpus
@pytest.mark.parametrize("snapshot", _corpus_files(SNAPSHOTS, (".pickle",)), ids=lambda p: p.name)
def test_corpus_snapshots_are_diagnosed(snapshot: Path, tmp_path: Path) -> None:
    result = diagnose_here(snapshot, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["facts"]["peak_allocated_bytes"] > 0
    assert report["facts"]["device_is_cuda"] is True


@needs_corpus
def test_two_rank_logdir_gets_the_rank_view(tmp_path: Path) -> None:
    # The tensorboard_trace_handler layout, linked (never copied) from the corpus.
    run = tmp_path / "logdir" / "job"
    run.mkdir(parents=True)
    for rank in (0, 1):
        src = TRACES / f"hta_trace_filter_sampled_rank-{rank}.json.gz"
        (run / f"node{rank}_42.1700000000.pt.trace.json.gz").symlink_to(src)
    before = _listing(tmp_path / "logdir")
    result = diagnose_here(tmp_path / "logdir", "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "Ranks" in result.stdout
    assert "Step time p50 across 2 ranks" in result.stdout
    assert "world size 128" in result.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    ranks = report["ranks"]
    # The rank the other waits for comes first: the report diagnoses its trace.
    assert [r["rank"] for r in ranks] == [1, 0]
    assert all(r["steps"] == 2 and r["step_ms_p50"] > 0 for r in ranks)
    assert report["facts"]["ranks_launched"] == 2
    assert report["facts"]["straggler_rank"] in (0, 1)
    assert _listing(tmp_path / "logdir") == before
    # NCCL SendRecv (all-to-all) dominates these ranks and a quarter of the GPU time is
    # exposed communication (HTA: non-compute 23-29%). Rank 1 arrives last of the two traced
    # ranks, but 126 ranks of the job were not traced and may keep it waiting: two ranks'
    # traces never promise the whole exposed share back (issue 22), only half of it.
    facts = report["facts"]
    assert 0.2 < facts["gpu_comm_exposed_frac"] < 0.35
    assert facts["job_late_rank"] == 1 and facts["ranks_untraced"] == 126
    comm = next(f for f in report["findings"] if f["rule_id"] == "communication-heavy")
    assert comm["gain"]["step_time_frac"] <= 0.5 * facts["gpu_comm_exposed_frac"] + 1e-3
    assert "126 ranks were not traced" in comm["explanation"]
    assert facts["comm_dominant_collective"] == "all_to_all"
    assert "tiny-kernels" not in {f["rule_id"] for f in report["findings"]}


def test_input_bound_trace_is_input_bound_not_launch_bound(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    synthetic.write_trace(
        inp / "resnet" / "host_1.1.pt.trace.json.gz", synthetic.input_bound_trace(steps=8)
    )
    result = diagnose_here(inp, "-o", tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    ids = [f["rule_id"] for f in report["findings"]]
    assert ids[0] == "input-bound", ids
    assert "launch-bound" not in ids
    evidence = {e["name"]: e["value"] for e in report["findings"][0]["evidence"]}
    assert evidence["data_wait_frac"] == pytest.approx(1 / 3, abs=0.01)
    skipped = " ".join(s["reason"] for s in report["skipped_rules"])
    assert "diagnosed from a trace without a perfdoctor run" in skipped


def test_read_only_input_and_default_output(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    synthetic.write_trace(inp / "a" / "w_rank0.5.pt.trace.json", synthetic.input_bound_trace())
    synthetic.write_trace(inp / "a" / "w_rank0.9.pt.trace.json", synthetic.input_bound_trace())
    synthetic.write_trace(inp / "b" / "x.json.gz", synthetic.input_bound_trace())
    before = _listing(inp)
    work = tmp_path / "work"
    work.mkdir()
    result = diagnose(inp, cwd=work)
    assert result.returncode == 0, result.stderr
    assert _listing(inp) == before
    (made,) = (work / "perfdoctor-diagnose").iterdir()
    # A handler-layout directory is named after the directory, a free-named file after itself.
    assert sorted(p.name for p in made.iterdir()) == ["a", "x"]
    assert (made / "a" / "report.md").is_file() and (made / "x" / "report.json").is_file()
    assert "reports written to" in result.stderr
    report = json.loads((made / "a" / "report.json").read_text())
    assert any("2 profiler windows" in w for w in report["warnings"])


def test_out_option_and_formats(tmp_path: Path) -> None:
    trace = synthetic.write_trace(tmp_path / "t.json", synthetic.input_bound_trace())
    out = tmp_path / "mine"
    result = diagnose(trace, "-o", out, "-f", "md", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# perfdoctor diagnose")
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    quiet = diagnose_here(trace, "-o", tmp_path / "q", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == ""


def test_exit_codes(tmp_path: Path) -> None:
    # One real process per documented code (66, 68; 2 is click's own, in process).
    missing = diagnose(tmp_path / "nope", cwd=tmp_path)
    assert missing.returncode == 66
    assert "does not exist" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = diagnose_here(tmp_path / "empty")
    assert empty.returncode == 66
    assert "no trace or snapshot found in" in empty.stderr
    unusable = synthetic.write_trace(tmp_path / "u.json", {"traceEvents": []})
    bad = diagnose(unusable, "-o", tmp_path / "o1", cwd=tmp_path)
    assert bad.returncode == 68
    assert "holds no events" in bad.stderr
    assert len([ln for ln in bad.stderr.splitlines() if ln.strip()]) == 1
    garbage = tmp_path / "g.json.gz"
    garbage.write_bytes(b"\x1f\x8b not gzip")
    assert diagnose_here(garbage, "-o", tmp_path / "o2").returncode == 68
    notes = tmp_path / "n.txt"
    notes.write_text("hello")
    assert diagnose_here(notes, "-o", tmp_path / "o3").returncode == 68
    usage = diagnose_here(unusable, "-f", "pdf")
    assert usage.returncode == 2
