"""Issue 7 item 5, large runs stay usable: the checks, with the figures behind them.

    python benchmarks/large_runs.py [--model tuned_mlp] [--long-steps 200]

1. The profiler window is bounded: the same script profiled with `--steps 20` and with
   `--steps N` (N = --long-steps) writes a trace of the same size (the window is
   --profile-steps, 3 by default, whatever the training length).
2. Traces are gzipped by default: the trace files' names and magic bytes.
3. The CUDA memory history is bounded: spec.json carries memory_history_max_entries, and a
   run whose history reached it is reported as truncated. This machine may have no GPU, so
   the report side is checked on a copy of the recorded run whose observations say the
   history was truncated (what the child writes when it reached max_entries), re-analysed
   with perfdoctor's own diagnosis: is the truncation visible in report.md, report.html
   and report.json?
4. The run directory's size is reported: report.json's run_dir_bytes against the bytes on
   disk after the reports were written.

It prints what it found, it never asserts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from _common import QUIET_LOG_EVERY, ROOT, machine_line, out, run_child

from perfdoctor import rundir
from perfdoctor.diagnose import analyze_session, write_reports


def profile(model: Path, steps: int, runs: Path) -> Path:
    command = [sys.executable, "-m", "perfdoctor", "profile", "--quiet", "--no-apply"]
    command += ["--steps", str(steps), "--out", str(runs), str(model)]
    command += ["--log-every", QUIET_LOG_EVERY, "--max-steps", str(steps + 100)]
    res = run_child(command, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"perfdoctor profile --steps {steps} failed:\n{res.stderr[-2000:]}")
    return (runs / "latest").resolve()


def trace_facts(session: Path) -> dict:
    traces = rundir.find_traces(session / rundir.BASELINE_LABEL)
    trace = traces[-1]
    raw = trace.read_bytes()
    gzipped = raw[:2] == b"\x1f\x8b"
    body = gzip.decompress(raw) if gzipped else raw
    events = json.loads(body)["traceEvents"]
    steps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return {
        "name": trace.name,
        "gzipped": gzipped and trace.name.endswith(".gz"),
        "disk": len(raw),
        "raw": len(body),
        "events": len(events),
        "profiler_steps": steps,
    }


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def check_window(model: Path, long_steps: int, work: Path) -> Path:
    short = profile(model, 20, work / "short")
    long = profile(model, long_steps, work / "long")
    a, b = trace_facts(short), trace_facts(long)
    out(f"1. profiler window bounded ({model.stem}):")
    for steps, f, session in ((20, a, short), (long_steps, b, long)):
        out(
            f"   --steps {steps:>4}: trace {f['disk'] / 1e3:.0f} KB gzipped, "
            f"{f['raw'] / 1e6:.2f} MB raw, {f['events']} events, {f['profiler_steps']} "
            f"ProfilerStep spans; run directory {dir_bytes(session) / 1e3:.0f} KB"
        )
    out(f"   trace size ratio long/short: {b['raw'] / a['raw']:.2f} (1.00 = bounded)")
    out(f"2. gzip by default: {a['gzipped'] and b['gzipped']} ({a['name']})")
    return short


def check_memory_history(session: Path, work: Path) -> None:
    spec = rundir.read_json(session / rundir.BASELINE_LABEL / rundir.SPEC_FILE)
    limit = spec.get("memory_history_max_entries")
    out(f"3. memory history bounded: spec.json memory_history_max_entries = {limit}")
    copy = work / "session-copy"  # no "truncat" in any path the reports print
    shutil.copytree(session, copy, symlinks=True)
    for name in (rundir.REPORT_JSON, rundir.REPORT_MD, rundir.REPORT_HTML):
        (copy / name).unlink(missing_ok=True)
    obs_path = copy / rundir.BASELINE_LABEL / rundir.OBSERVATIONS_FILE
    obs = rundir.read_json(obs_path)
    obs["memory_history"] = {
        "requested": True,
        "available": True,
        "recorded": True,
        "max_entries": limit,
        "entries": limit,
        "truncated": True,
        "snapshot_reason": "profiled window",
    }
    rundir.write_json(obs_path, obs)
    report = analyze_session(copy)
    paths = write_reports(copy, report).paths
    out(f"   fact memory_history_truncated = {report.facts.get('memory_history_truncated')}")
    fact = "memory_history_truncated"
    for name, path in sorted(paths.items()):
        text = Path(path).read_text().lower()
        listed = fact in text
        # Beyond a raw listing of the facts: a warning, a finding or a note in words.
        said = "truncat" in text.replace(fact, "")
        out(f"   {name}: lists the fact: {listed}; says it in words: {said}")


def check_run_dir_bytes(session: Path) -> None:
    report = rundir.read_json(session / rundir.REPORT_JSON)
    reported = report.get("run_dir_bytes")
    on_disk = dir_bytes(session)
    reports = sum(
        (session / n).stat().st_size
        for n in (rundir.REPORT_JSON, rundir.REPORT_MD, rundir.REPORT_HTML)
        if (session / n).exists()
    )
    out(
        f"4. run directory size reported: run_dir_bytes = {reported}; on disk now {on_disk} "
        f"(the three reports add {reports})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tuned_mlp", help="sample model stem")
    parser.add_argument("--long-steps", type=int, default=200)
    args = parser.parse_args(argv)
    model = ROOT / "sample_models" / f"{args.model}.py"
    out(machine_line())
    with tempfile.TemporaryDirectory(prefix="pd-large-") as tmp:
        work = Path(tmp)
        session = check_window(model, args.long_steps, work)
        check_memory_history(session, work)
        check_run_dir_bytes(session)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
