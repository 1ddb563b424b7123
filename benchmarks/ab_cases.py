"""The three cases of the in-process A/B issue: does perfdoctor's verdict match the script's
own clock?

Per case, a small CPU script under benchmarks/ab_cases/:
    (a) slow_getitem.py  a Dataset with ~40 ms of Python/numpy work per batch against ~6 ms of
                         compute; fix `dataloader-workers` (not switchable: re-runs)
    (b) anomaly.py       set_detect_anomaly(True) left on; fix `anomaly-off` (in-process)
    (c) threads1.py      torch.set_num_threads(1) on 2 cores; fix `cpu-threads` (in-process)

1. `perfdoctor profile --json --quiet --only FIX script`, timed from the outside: verdict,
   speedup, interval, pairs, method, measurement time (the A/B child's measure_s) and the
   session's wall time end to end.
2. The direct measurement, at the same load: the plain script with the setting as planted
   (A) and fixed (B), alternating A B B A A B ..., each run's median ms/step from the
   script's own clock (after its warm-up); the ratio A/B per pair.

`--burner` keeps one core busy (`python -c "while True: pass"`) for the whole benchmark.

Run: python benchmarks/ab_cases.py [--pairs 3] [--cases a,b,c] [--burner] [--ab-budget 60]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT, Burner, conditions, machine_line, out, run_child, spread

CASES_DIR = ROOT / "benchmarks" / "ab_cases"
MS_RE = re.compile(r"ms/step median ([0-9.]+) mean ([0-9.]+) steps (\d+)")


@dataclass(frozen=True)
class Case:
    key: str
    script: str
    fix: str
    planted: tuple[str, ...]  # the direct measurement's A arm
    fixed: tuple[str, ...]  # its B arm
    steps: int  # steps of each direct run


CASES = {
    "a": Case("a", "slow_getitem.py", "dataloader-workers", ("--workers", "0"),
              # what dataloader-workers sizes here when loading dominates: 2 workers, the
              # script's own intra-op threads (sizing.py: the variant changes the workers only)
              ("--workers", "2"), 60),
    "b": Case("b", "anomaly.py", "anomaly-off", (), ("--no-anomaly",), 200),
    "c": Case("c", "threads1.py", "cpu-threads", ("--threads", "1"), ("--threads", "2"), 150),
}  # fmt: skip


def profile(case: Case, work: Path, ab_budget: float | None) -> dict:
    cmd = [sys.executable, "-m", "perfdoctor", "profile", "--json", "--quiet", "--only", case.fix]
    cmd += ["-o", str(work / f"runs-{case.key}")]
    if ab_budget is not None:
        cmd += ["--ab-budget", f"{ab_budget:g}"]
    cmd.append(str(CASES_DIR / case.script))
    res = run_child(cmd, cwd=ROOT, timeout_s=900)
    row: dict = {"wall_s": res.wall_s, "rc": res.returncode}
    try:
        report = json.loads(res.stdout)
    except ValueError:
        row["error"] = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return row
    variant = next((v for v in report.get("variants", []) if v["label"] == case.fix), None)
    if variant is None:
        row["error"] = f"no variant {case.fix}: {[v['label'] for v in report.get('variants', [])]}"
        return row
    row.update(variant)
    return row


def direct(case: Case, pairs: int) -> list[tuple[float, float]]:
    """(planted ms, fixed ms) per pair, alternating A B / B A."""
    script = str(CASES_DIR / case.script)
    steps = ("--steps", str(case.steps))
    result = []
    for k in range(pairs):
        order = ("A", "B") if k % 2 == 0 else ("B", "A")
        ms = {}
        for arm in order:
            argv = case.planted if arm == "A" else case.fixed
            res = run_child([sys.executable, script, *steps, *argv], cwd=ROOT, timeout_s=600)
            m = MS_RE.search(res.stdout)
            ms[arm] = float(m.group(1)) if m else float("nan")
        result.append((ms["A"], ms["B"]))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3, help="direct A/B pairs per case")
    p.add_argument("--cases", default="a,b,c")
    p.add_argument("--burner", action="store_true", help="one CPU burner for the duration")
    p.add_argument("--ab-budget", type=float, default=None, help="passed to perfdoctor")
    opts = p.parse_args()
    cases = [CASES[k.strip()] for k in opts.cases.split(",") if k.strip()]
    out(machine_line())
    burner = "one CPU burner" if opts.burner else "no burner"
    out(f"cases {', '.join(c.key for c in cases)}; {burner}")
    work = Path(tempfile.mkdtemp(prefix="pd-abcases-"))
    rows = []
    try:
        with Burner(opts.burner):
            for case in cases:
                before = conditions()
                prof = profile(case, work, opts.ab_budget)
                mid = conditions()
                pairs = direct(case, opts.pairs)
                after = conditions()
                rows.append((case, prof, pairs))
                out(f"\n({case.key}) {case.script}, --only {case.fix}")
                out(f"  before: {before}")
                out(f"  between: {mid}")
                out(f"  after: {after}")
                if "error" in prof:
                    out(f"  perfdoctor: rc {prof['rc']}: {prof['error']}")
                else:
                    out(f"  perfdoctor: {prof.get('verdict')}: {prof.get('reason')}")
                    for a in prof.get("applied") or []:
                        out(f"    applied {a['id']}: {a.get('detail')}")
                out(f"  session wall {prof['wall_s']:.1f} s")
                for a_ms, b_ms in pairs:
                    ratio = a_ms / b_ms
                    out(f"  direct: planted {a_ms:.2f} ms, fixed {b_ms:.2f} ms, ratio {ratio:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out()
    out(
        "| case | fix | verdict | speedup | interval | pairs | method | measured | session wall "
        "| direct: planted / fixed ms (median) | direct ratio [range] |"
    )
    out("|---|---|---|---|---|---|---|---|---|---|---|")
    for case, prof, pairs in rows:
        ratios = spread([a / b for a, b in pairs])
        a_med = spread([a for a, _ in pairs])
        b_med = spread([b for _, b in pairs])
        interval = prof.get("interval")
        iv = (
            f"[{interval[0]:.2f}, {interval[1]:.2f}]"
            if interval
            else (f"noise +-{prof['speedup_noise']:.2f}" if prof.get("speedup_noise") else "-")
        )
        speed = f"{prof['speedup']:.2f}x" if prof.get("speedup") else "-"
        meas = f"{prof['measure_s']:.1f} s" if prof.get("measure_s") is not None else "-"
        out(
            f"| ({case.key}) {case.script} | {case.fix} | {prof.get('verdict', 'error')} | {speed} "
            f"| {iv} | {prof.get('pairs') or '-'} | {prof.get('method') or '-'} | {meas} "
            f"| {prof['wall_s']:.0f} s | {a_med.median if a_med else float('nan'):.1f} / "
            f"{b_med.median if b_med else float('nan'):.1f} | "
            f"{ratios.fmt(2, 'x') if ratios else '-'} |"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
