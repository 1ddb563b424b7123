"""`perfdoctor diagnose` on a big real GPU trace, beside stdlib `json.load` of the same file.

Issue 30 target: the whole `perfdoctor diagnose TRACE` process (start-up, imports, parse,
analysis, every report written) at or below 0.5x a process that only does `json.load` of
the same file, on a 183 MB and a 2 GB trace, with peak RSS under 1.2 GB and 2 GB.

The trace is a real one from the GPU corpus, repeated with `tools/make_big_trace.py` (more
copies of its steps, shifted timestamps, renumbered ids) into a scratch folder outside the
checkout (`--work`, default a temporary folder; never committed). Each measurement is its
own process, read with wait4: wall seconds, its own CPU seconds (user + sys) and peak RSS.
Arms alternate within each round (A B C / C B A), so drift of a shared machine cancels out;
on a loaded machine the CPU seconds are the stable figure. Each checkout's modules are
byte-compiled first, as an installed package's are: with PYTHONDONTWRITEBYTECODE set (as in
some shells here) every run would otherwise compile perfdoctor's ~130 modules from source,
about 1 s of CPU that no user pays.

    python benchmarks/diagnose_speed.py                           # 183 MB, 3 rounds
    python benchmarks/diagnose_speed.py --sizes 183,2000 --rounds 2
    python benchmarks/diagnose_speed.py --baseline-src DIR         # an older checkout beside it
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, ChildResult, conditions, machine_line, out, run_child, spread

CORPUS = ROOT.parent / "shared" / "gpu-corpus" / "traces"
DEFAULT_TRACE = "hta_nccl_parser_config_nccl_data.json.gz"
JSON_LOAD = "import json, sys\nwith open(sys.argv[1], 'rb') as f:\n    json.load(f)\n"


def build_trace(base: Path, size_mb: int, work: Path) -> Path:
    target = work / f"{base.name.split('.')[0]}_{size_mb}mb.pt.trace.json"
    if not target.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "make_big_trace.py"),
                "--from",
                str(base),
                "--size-mb",
                str(size_mb),
                "-o",
                str(target),
            ],
            check=True,
        )
    return target


def arms(trace: Path, work: Path, baseline_src: Path | None) -> dict[str, tuple[list[str], dict]]:
    def diagnose(src: Path, tag: str) -> tuple[list[str], dict]:
        return (
            [
                sys.executable,
                "-m",
                "perfdoctor",
                "diagnose",
                str(trace),
                "-o",
                str(work / f"reports-{tag}"),
                "--quiet",
            ],
            {"PYTHONPATH": str(src)},
        )

    found = {"json.load": ([sys.executable, "-c", JSON_LOAD, str(trace)], {})}
    found["perfdoctor diagnose"] = diagnose(ROOT, "this")
    if baseline_src is not None:
        found["diagnose (baseline src)"] = diagnose(baseline_src, "baseline")
    return found


def cpu(r: ChildResult) -> float:
    return r.user_s + r.sys_s


def _fmt(values: list[float], digits: int = 2) -> str:
    found = spread(values)
    return "-" if found is None else found.fmt(digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="183", help="uncompressed MB, comma separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--trace", type=Path, default=CORPUS / DEFAULT_TRACE, help="the real trace to repeat"
    )
    parser.add_argument("--work", type=Path, help="scratch folder for the traces (kept)")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="a checkout of an older perfdoctor to measure beside this one",
    )
    args = parser.parse_args(argv)
    if not args.trace.exists():
        out(f"no trace at {args.trace}: pass --trace")
        return 0
    for src in (ROOT, args.baseline_src):
        if src is not None:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(src / "perfdoctor")],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    work = args.work or Path(tempfile.mkdtemp(prefix="perfdoctor-diagnose-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    out(machine_line())
    out(f"start: {conditions()}")
    out(f"base trace: {args.trace.name}; scratch: {work}")
    for size in (int(s) for s in args.sizes.split(",")):
        trace = build_trace(args.trace, size, work)
        results: dict[str, list[ChildResult]] = {}
        commands = arms(trace, work, args.baseline_src)
        names = list(commands)
        for i in range(args.rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                command, env = commands[name]
                # cwd: the scratch folder. `python -m` puts the working directory first on
                # sys.path, ahead of PYTHONPATH: run from a checkout, every arm imported that
                # checkout's perfdoctor (the baseline arm measured this branch's code).
                r = run_child(command, cwd=work, env={**env, "OMP_NUM_THREADS": "1"})
                if r.returncode != 0:
                    out(f"{name} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
                    return 1
                results.setdefault(name, []).append(r)
        out()
        out(
            f"### {trace.stat().st_size / 1e6:.0f} MB ({trace.name}), {args.rounds} rounds, "
            f"load after: {os.getloadavg()[0]:.2f}"
        )
        out()
        out("| arm | wall s | CPU s (user+sys) | peak RSS | CPU / json.load (per round) |")
        out("|---|---|---|---|---|")
        ref = results["json.load"]
        for name in names:
            rs = results[name]
            ratios = [cpu(a) / cpu(b) for a, b in zip(rs, ref, strict=True)]
            out(
                f"| {name} | {_fmt([r.wall_s for r in rs])} | {_fmt([cpu(r) for r in rs])} "
                f"| {max(r.max_rss_bytes for r in rs) / 2**20:.0f} MiB | {_fmt(ratios, 2)}x |"
            )
    out()
    out(f"end: {conditions()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
