"""A/A: how often does the in-process A/B call a fix "faster" or "slower" when there is none?

Each run is one real in-process A/B child (perfdoctor.collect.launcher.launch with
RunSpec(ab=ABDesign(...))) whose test arm is the baseline switched to itself: two arms that
switch nothing, `Arm("baseline")` and `Arm("same")`, one `Comparison("same", 0, 1)`. The
stopping rule (optimize/inprocess.py) shares ALPHA = 5% over all of its looks, so "faster" or
"slower" should come out in at most 5% of the runs; "no-gain" (interval within +-5%) is the
right answer, "budget" (still undecided when the budget ran out) an honest one.

Each run gets its own design seed (the block order), so the runs are independent draws.
`--burner` keeps one core busy (`python -c "while True: pass"`) for the whole benchmark: on
a 2-core machine the script's two intra-op threads then fight for one core.

Run: python benchmarks/ab_false_verdicts.py [--runs 40] [--budget 10] [--burner]
     [--statistic paired-medians|throughput-windows] [--long-blocks]
     [--script benchmarks/ab_cases/tiny_mlp.py] [-- script args]
"""

from __future__ import annotations

import argparse
import collections
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, Burner, conditions, machine_line, out

DEFAULT_SCRIPT = ROOT / "benchmarks" / "ab_cases" / "tiny_mlp.py"


def one_run(
    script: Path,
    args: list[str],
    budget_s: float,
    seed: int,
    run_dir: Path,
    statistic: str = "paired-medians",
    long_blocks: bool = False,
) -> dict:
    from perfdoctor.collect.launcher import launch
    from perfdoctor.model import ABDesign, Arm, Comparison, RunSpec, StepPlan, Target
    from perfdoctor.optimize.inprocess import final_estimate, load_ab_log

    design = ABDesign(
        arms=(Arm("baseline"), Arm("same")),
        comparisons=(Comparison("same", 0, 1),),
        budget_s=budget_s,
        seed=seed,
        statistic=statistic,
        long_blocks=long_blocks,
    )
    spec = RunSpec(
        label="aa",
        target=Target("script", str(script), tuple(args)),
        cwd=str(ROOT),
        run_dir=str(run_dir),
        plan=StepPlan(warmup_steps=5, profiled_steps=0),
        profile=False,
        ab=design,
    )
    started = time.perf_counter()
    manifest = launch(spec, timeout_s=budget_s + 180.0, echo_output=False)
    wall = time.perf_counter() - started
    ab = load_ab_log(run_dir)
    row = {"status": manifest.status, "wall_s": wall, "ended": None, "est": None, "ab": ab}
    if ab is None:
        return row
    end = ab.end_of("same")
    row["ended"] = end.ended if end else None
    comparison = ab.comparison("same")
    if comparison is not None and end is not None:
        row["est"] = final_estimate(ab.design, list(ab.blocks), comparison, end.rounds)
    return row


def category(ended: str | None) -> str:
    if ended in ("faster", "slower", "no-gain", "budget"):
        return ended
    return f"other ({ended})"


def upper_95(k: int, n: int) -> float:
    """Clopper-Pearson one-sided 95% upper bound of a proportion (bisection on the binomial
    tail: no scipy)."""
    if n == 0 or k >= n:
        return 1.0

    def cdf(p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf(mid) > 0.05:
            lo = mid
        else:
            hi = mid
    return hi


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--budget", type=float, default=10.0, help="measurement seconds per run")
    p.add_argument("--burner", action="store_true", help="one CPU burner for the duration")
    p.add_argument("--script", type=Path, default=DEFAULT_SCRIPT)
    p.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    p.add_argument(
        "--statistic",
        default="paired-medians",
        choices=("paired-medians", "throughput-windows"),
        help="the engine's per-block statistic (optimize/engine.py)",
    )
    p.add_argument(
        "--long-blocks",
        action="store_true",
        help="looks from 3 pairs, as perfdoctor takes them for blocks of 2 s or more "
        "(engine.block_looks); give a script whose steps make such blocks",
    )
    p.add_argument("script_args", nargs="*")
    opts = p.parse_args()
    script = opts.script.resolve()
    out(machine_line())
    out(
        f"A/A in-process: {opts.runs} runs of {script.relative_to(ROOT)} "
        f"{' '.join(opts.script_args)}, budget {opts.budget:g} s each, "
        f"{'one CPU burner' if opts.burner else 'no burner'}"
    )
    out(f"before: {conditions()}")
    work = opts.keep or Path(tempfile.mkdtemp(prefix="pd-aa-"))
    rows = []
    started = time.perf_counter()
    try:
        with Burner(opts.burner):
            for i in range(opts.runs):
                run_dir = work / f"run-{i:03d}"
                shutil.rmtree(run_dir, ignore_errors=True)
                row = one_run(
                    script,
                    list(opts.script_args),
                    opts.budget,
                    1000 + i,
                    run_dir,
                    opts.statistic,
                    opts.long_blocks,
                )
                rows.append(row)
                est, ab = row["est"], row["ab"]
                fig = est.describe() if est else "no estimate"
                meas = f"{ab.measure_s:.1f}s measured, {ab.rounds} rounds" if ab else "no ab.json"
                out(
                    f"  run {i + 1:>3}: {row['status']:<10} {category(row['ended']):<10} "
                    f"{fig}; {meas}; {row['wall_s']:.1f}s wall"
                )
    finally:
        if opts.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    out(f"after: {conditions()}")
    n = len(rows)
    counts = collections.Counter(category(r["ended"]) for r in rows)
    false_calls = counts["faster"] + counts["slower"]
    out()
    out("| outcome | runs | share |")
    out("|---|---|---|")
    for key in ("faster", "slower", "no-gain", "budget"):
        out(f"| {key} | {counts[key]} | {counts[key] / max(n, 1):.0%} |")
    for key, value in sorted(counts.items()):
        if key.startswith("other"):
            out(f"| {key} | {value} | {value / max(n, 1):.0%} |")
    out(
        f"| **faster + slower (false verdicts)** | **{false_calls}** | "
        f"**{false_calls / max(n, 1):.1%}** (95% upper bound {upper_95(false_calls, n):.1%}) |"
    )
    ests = [r["est"] for r in rows if r["est"] is not None]
    if ests:
        import statistics

        speedups = sorted(e.speedup for e in ests)
        widths = sorted(math.expm1(e.half_width_log) for e in ests)
        pairs = sorted(e.pairs for e in ests)
        measure = sorted(r["ab"].measure_s for r in rows if r["ab"] is not None)
        wall = statistics.median(r["wall_s"] for r in rows)
        out()
        out(
            f"speedup median {statistics.median(speedups):.3f} "
            f"[{speedups[0]:.3f}-{speedups[-1]:.3f}]; interval half-width median "
            f"+-{statistics.median(widths):.1%} [{widths[0]:.1%}-{widths[-1]:.1%}]; pairs "
            f"median {statistics.median(pairs)} [{pairs[0]}-{pairs[-1]}]; measured "
            f"{statistics.median(measure):.1f} s median; wall {wall:.1f} s "
            f"median per run, {time.perf_counter() - started:.0f} s in all"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
