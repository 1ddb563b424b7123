"""P2, analysis at scale: parse + facts of 50 MB .. 2 GB traces, side by side with HTA.

    python benchmarks/analysis_scale.py                 # 50 and 200 MB, json and json.gz, CPU
                                                        # and synthetic-GPU, HTA beside each
    python benchmarks/analysis_scale.py --big           # adds the 1 GB cases (slow: minutes)
    python benchmarks/analysis_scale.py --no-hta --sizes 50 --repeat 3
    python benchmarks/analysis_scale.py --sizes 200,2000 --no-gpu --report
                                                        # + `perfdoctor report` end to end
    python benchmarks/analysis_scale.py --from-trace real.json.gz --sizes 200 --report
                                                        # repeat a real (GPU) trace instead

How the traces are made: each sample model in --models is profiled once here with
`perfdoctor profile --no-apply` (a real, untrimmed CPU trace of its default 3-step window),
then tools/make_big_trace.py repeats its steps with shifted timestamps and renumbered ids up
to each size (uncompressed), with and without --synthetic-gpu (a launch and a kernel per
leaf CPU op). The .json.gz form is the same file gzipped. Each trace is put in a copy of the
recorded run directory, so the measured call is exactly what a report does:
`load_run(dir)` + `derive_facts(record)`.

With --report, each case is also a session directory (the recorded session.json + the run
directory), and `python -m perfdoctor report SESSION` is timed as a whole process: start-up,
imports, parse, facts, rules, and every report format written (terminal, md, html, json),
with its wall seconds, its own CPU seconds and its peak RSS. --from-trace repeats the steps of
the given trace (e.g. a real GPU trace) instead of the recorded one; the run directory around
it is still the sample model's.

Every measurement runs in a fresh subprocess (benchmarks/_analyze_one.py) whose peak RSS is
read with os.wait4; the imports are outside the timed call but inside the RSS. HTA
(PyPI holistictraceanalysis) is installed by this script into its own venv under the cache
dir (never a project dependency) and runs TraceAnalysis(trace_dir) + get_temporal_breakdown()
on the same file (benchmarks/_hta_one.py). Big files are deleted at the end (--keep keeps).

It prints, it never asserts.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    QUIET_LOG_EVERY,
    ROOT,
    ChildResult,
    machine_line,
    out,
    run_child,
    spread,
)

from perfdoctor.rundir import find_traces

HERE = Path(__file__).resolve().parent
ANALYZE_ONE = HERE / "_analyze_one.py"
HTA_ONE = HERE / "_hta_one.py"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
    "perfdoctor-benchmarks"
)
HTA_PACKAGE = "holistictraceanalysis"
HTA_PANDAS = "pandas<3"


@dataclass
class Case:
    model: str
    gpu: bool
    size_mb: int
    form: str  # "json" or "json.gz"
    trace: Path
    run_dir: Path
    events: int
    uncompressed_bytes: int
    results: dict[str, list[ChildResult]] = field(default_factory=dict)
    hta: dict | None = None
    hta_rss: int | None = None
    source: str = ""  # the repeated trace's name when --from-trace gave it

    @property
    def name(self) -> str:
        kind = "gpu-synthetic" if self.gpu else "cpu"
        if self.source:
            kind = f"from {self.source[:28]}"
        size = f"{self.size_mb / 1000:g} GB" if self.size_mb >= 1000 else f"{self.size_mb} MB"
        return f"{self.model} {kind} {size} .{self.form}"

    @property
    def session(self) -> Path:
        return self.run_dir.parent


# --------------------------------------------------------------------------- HTA venv


def ensure_hta(cache: Path) -> Path | None:
    """HTA in its own venv; returns its python, or None (with the reason printed).

    pandas is held below 3: HTA 0.5.0 under pandas 3 fails on every GPU trace (an int16
    column it widens in place raises "Invalid value ... for dtype 'int16'"), so its own
    figures are taken with the pandas it was released against.
    """
    venv = cache / "hta-venv"
    python = venv / "bin" / "python"
    steps = []
    if not python.exists():
        out(f"installing {HTA_PACKAGE} into {venv} (once; pulls pandas, jupyterlab, ...)")
        cache.mkdir(parents=True, exist_ok=True)
        steps.append([sys.executable, "-m", "venv", str(venv)])
    steps.append([str(python), "-m", "pip", "install", "-q", HTA_PACKAGE, HTA_PANDAS])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            out(f"HTA install failed ({' '.join(step[:4])}): {proc.stderr.strip()[-500:]}")
            return None
    return python


def versions_in(python: Path) -> str:
    code = "import importlib.metadata as m, pandas; print(m.version('{p}'), pandas.__version__)"
    proc = subprocess.run(
        [str(python), "-c", code.format(p=HTA_PACKAGE)], capture_output=True, text=True
    )
    got = proc.stdout.split()
    return f"HTA {got[0]}, pandas {got[1]}" if len(got) == 2 else "HTA ?"


# --------------------------------------------------------------------------- traces


def record_base(model: str, work: Path) -> Path:
    """A real run directory of one sample model (baseline only, default plan)."""
    runs = work / f"base-{model}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfdoctor",
            "profile",
            "--no-apply",
            "--quiet",
            "--out",
            str(runs),
            str(ROOT / "sample_models" / f"{model}.py"),
            "--log-every",
            QUIET_LOG_EVERY,
        ],
        capture_output=True,
        text=True,
    )
    baseline = runs / "latest" / "baseline"
    if proc.returncode != 0 or not find_traces(baseline):
        raise SystemExit(f"recording {model} failed:\n{proc.stdout[-1000:]}{proc.stderr[-2000:]}")
    return baseline


def make_case_dir(template: Path, dest: Path) -> None:
    """A copy of a recorded run directory without its trace, inside a copy of its session
    directory (session.json only), so `perfdoctor report dest.parent` works on it."""
    dest.mkdir(parents=True)
    for item in template.iterdir():
        if item.is_file() and item not in find_traces(template):
            shutil.copy2(item, dest / item.name)
    session_file = template.parent / "session.json"
    if session_file.is_file():
        shutil.copy2(session_file, dest.parent / session_file.name)


def trace_name(form: str) -> str:
    # The tensorboard_trace_handler layout the run directory contract expects.
    return f"{socket.gethostname()}_1.{time.time_ns()}.pt.trace.{form}"


def build_cases(
    model: str,
    template: Path,
    sizes: list[int],
    gpu: bool,
    work: Path,
    source: Path | None = None,
) -> list[Case]:
    sys.path.insert(0, str(ROOT / "tools"))
    from make_big_trace import make_big_trace

    base_trace = source or find_traces(template)[-1]
    cases = []
    for size in sizes:
        kind = f"from-{source.name.split('.')[0]}" if source else ("gpu" if gpu else "cpu")
        tag = f"{model}-{kind}-{size}"
        plain_dir = work / f"{tag}-json" / "baseline"
        make_case_dir(template, plain_dir)
        plain = plain_dir / trace_name("json")
        info = make_big_trace(base_trace, plain, size, synthetic_gpu=gpu)
        gz_dir = work / f"{tag}-gz" / "baseline"
        make_case_dir(template, gz_dir)
        gz = gz_dir / trace_name("json.gz")
        with plain.open("rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        raw = plain.stat().st_size
        for form, path, run_dir in (("json", plain, plain_dir), ("json.gz", gz, gz_dir)):
            case = Case(model, gpu, size, form, path, run_dir, info["events"], raw)
            case.source = source.name if source else ""
            cases.append(case)
    return cases


# --------------------------------------------------------------------------- measuring


def analyze(mode: str, target: Path | None) -> ChildResult:
    command = [sys.executable, str(ANALYZE_ONE), mode] + ([str(target)] if target else [])
    return run_child(command, cwd=HERE)


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def seconds_of(results: list[ChildResult]) -> list[float]:
    return [last_json(r.stdout).get("seconds", float("nan")) for r in results]


def run_hta(python: Path, case: Case, timeout_s: float) -> None:
    hta_dir = case.run_dir.parent / f"{case.run_dir.name}-hta"
    hta_dir.mkdir(exist_ok=True)
    link = hta_dir / case.trace.name
    if not link.exists():
        link.symlink_to(case.trace)
    res = run_child([str(python), str(HTA_ONE), str(hta_dir)], cwd=HERE, timeout_s=timeout_s)
    data = last_json(res.stdout)
    if not data:
        reason = "timed out" if res.wall_s >= timeout_s else f"exit {res.returncode}"
        tail = res.stderr.strip().splitlines()[-1:] or [""]
        data = {"error": f"{reason}: {tail[0][:200]}", "failed_after_s": res.wall_s}
    case.hta = data
    case.hta_rss = res.max_rss_bytes


def report_end_to_end(case: Case) -> ChildResult:
    """`perfdoctor report SESSION` as a whole process (all formats written)."""
    command = [sys.executable, "-m", "perfdoctor", "report", str(case.session)]
    res = run_child(command, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    if res.returncode != 0:
        raise SystemExit(f"{case.name}: perfdoctor report failed:\n{res.stderr[-2000:]}")
    return res


def measure(
    cases: list[Case],
    repeat: int,
    hta_python: Path | None,
    hta_timeout: float,
    end_to_end: bool = False,
) -> None:
    """perfdoctor's measurements alternate over the cases, round after round, so a busy
    moment of the shared machine spreads over all of them instead of one."""
    for r in range(repeat):
        for case in cases if r % 2 == 0 else list(reversed(cases)):
            facts = analyze("facts", case.run_dir)
            if facts.returncode != 0:
                raise SystemExit(f"{case.name}: analysis failed:\n{facts.stderr[-2000:]}")
            case.results.setdefault("facts", []).append(facts)
            case.results.setdefault("parse", []).append(analyze("parse", case.trace))
            line = f"  {case.name}: parse+facts {seconds_of([facts])[0]:.2f} s"
            if end_to_end:
                rep = report_end_to_end(case)
                case.results.setdefault("report", []).append(rep)
                line += (
                    f", report {rep.wall_s:.2f} s wall / {rep.user_s + rep.sys_s:.2f} s CPU, "
                    f"{rep.max_rss_bytes / 2**20:.0f} MiB"
                )
            out(f"{line} (round {r + 1})")
    if hta_python is not None:
        for case in cases:
            run_hta(hta_python, case, hta_timeout)
            got = case.hta or {}
            what = (
                f"{got['total_s']:.1f} s"
                if "total_s" in got
                else f"failed: {got.get('error', '?')[:80]}"
            )
            out(f"  HTA {case.name}: {what}")


# --------------------------------------------------------------------------- report


def fmt_s(values: list[float]) -> str:
    s = spread(values)
    if s is None:
        return "-"
    return f"{s.median:.2f} s" if s.n == 1 else f"{s.median:.2f} s [{s.low:.2f}-{s.high:.2f}]"


def hta_cells(case: Case, ours: float) -> tuple[str, str, str]:
    got = case.hta
    if got is None:
        return "not run", "-", "-"
    rss = f"{case.hta_rss / 2**30:.2f} GiB" if case.hta_rss else "-"
    if "total_s" in got:
        cell = f"{got['parse_s']:.1f} + {got['breakdown_s']:.1f} s"
        return cell, rss, f"{got['total_s'] / ours:.0f}x"
    parse = f"parse {got['parse_s']:.1f} s, " if "parse_s" in got else ""
    ratio = f"{got['parse_s'] / ours:.0f}x (parse only)" if "parse_s" in got else "-"
    return f"{parse}breakdown failed: {got.get('error', '?')[:70]}", rss, ratio


def report(cases: list[Case], idle_rss: int) -> None:
    out("")
    out(
        "| trace | events | on disk | perfdoctor parse+facts | its process CPU | peak RSS | "
        "of which parse | HTA parse + breakdown | HTA peak RSS | HTA / perfdoctor |"
    )
    out("|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        facts = seconds_of(case.results["facts"])
        parse = seconds_of(case.results["parse"])
        rss = max(r.max_rss_bytes for r in case.results["facts"])
        # The child's own CPU (imports included): the figure a loaded machine disturbs least.
        cpu = [r.user_s + r.sys_s for r in case.results["facts"]]
        hta, hta_rss, ratio = hta_cells(case, statistics.median(facts))
        out(
            f"| {case.name} | {case.events / 1e6:.2f} M | {case.trace.stat().st_size / 1e6:.0f} MB"
            f" | {fmt_s(facts)} | {fmt_s(cpu)} | {rss / 2**20:.0f} MiB | {fmt_s(parse)} | {hta}"
            f" | {hta_rss} "
            f"| {ratio} |"
        )
    floor = idle_rss / 2**20
    out(f"(RSS floor: the analysis process after its imports, before reading: {floor:.0f} MiB)")
    ended = [c for c in cases if c.results.get("report")]
    if ended:
        out("")
        out("`perfdoctor report SESSION` end to end (start-up, parse, facts, rules, all formats):")
        out("")
        out("| trace | on disk | wall | own CPU | peak RSS |")
        out("|---|---|---|---|---|")
        for case in ended:
            runs = case.results["report"]
            walls = [r.wall_s for r in runs]
            cpus = [r.user_s + r.sys_s for r in runs]
            rss = max(r.max_rss_bytes for r in runs)
            out(
                f"| {case.name} | {case.trace.stat().st_size / 1e6:.0f} MB | {fmt_s(walls)} | "
                f"{fmt_s(cpus)} | {rss / 2**20:.0f} MiB |"
            )
    out("")
    out("Linearity: seconds and MiB of RSS above the floor per 100 MB of uncompressed trace")
    groups: dict[tuple[str, bool, str], list[Case]] = {}
    for case in cases:
        groups.setdefault((case.model, case.gpu, case.form), []).append(case)
    for (model, gpu, form), group in groups.items():
        cells = []
        for case in sorted(group, key=lambda c: c.size_mb):
            per = case.uncompressed_bytes / 1e8
            secs = statistics.median(seconds_of(case.results["facts"])) / per
            rss = (max(r.max_rss_bytes for r in case.results["facts"]) - idle_rss) / 2**20 / per
            cells.append(f"{case.size_mb} MB: {secs:.2f} s, {rss:.0f} MiB")
        kind = "gpu-synthetic" if gpu else "cpu"
        out(f"  {model} {kind} .{form}: " + "; ".join(cells))
    out(
        "targets: 200 MB analysed in <= 3 s end to end (all reports); "
        "a 2 GB trace in < 2 GiB RSS; cost growing linearly"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200", help="uncompressed MB, comma separated")
    parser.add_argument("--big", action="store_true", help="add the 1000 MB cases")
    parser.add_argument("--models", default="gpt_char_lm", help="sample models to repeat")
    parser.add_argument("--no-gpu", action="store_true", help="skip the --synthetic-gpu cases")
    parser.add_argument("--repeat", type=int, default=2, help="perfdoctor rounds per case")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--hta-timeout", type=float, default=300.0, help="seconds per file")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="HTA venv lives here")
    parser.add_argument("--work", type=Path, help="where the traces go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the big traces")
    parser.add_argument(
        "--report", action="store_true", help="also time `perfdoctor report` end to end"
    )
    parser.add_argument(
        "--from-trace",
        type=Path,
        action="append",
        default=[],
        help="repeat this trace's steps instead of the recorded one's (repeatable)",
    )
    parser.add_argument(
        "--base-run", type=Path, help="a recorded run directory to use instead of recording one"
    )
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",") if s] + ([1000] if args.big else [])
    out(machine_line())
    hta_python = None if args.no_hta else ensure_hta(args.cache)
    if hta_python is not None:
        out(f"{versions_in(hta_python)} in {hta_python.parent.parent}")
    work = args.work or Path(tempfile.mkdtemp(prefix="pd-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        cases: list[Case] = []
        for model in args.models.split(","):
            template = args.base_run or record_base(model, work)
            if args.from_trace:
                for source in args.from_trace:
                    cases += build_cases(model, template, sizes, False, work, source)
                continue
            for gpu in (False,) if args.no_gpu else (False, True):
                cases += build_cases(model, template, sizes, gpu, work)
        out(f"{len(cases)} traces made in {work}; measuring")
        idle_rss = analyze("idle", None).max_rss_bytes
        measure(cases, args.repeat, hta_python, args.hta_timeout, args.report)
        report(cases, idle_rss)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
