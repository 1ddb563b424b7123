"""`perfdoctor profile` with apply, end to end: the default (fixes that switch between steps
measured in one process) against `--re-runs` (every fix by alternating re-runs).

Per sample model (the script's own defaults, the same for both arms), sessions alternate
default / re-runs, then re-runs / default in the next pair, so a drift of the machine
cancels out of the paired ratio. Each session is timed from the outside (`--json --quiet`,
the report read from stdout); the table gives each arm's wall times, the paired ratio
re-runs / default (above 1: the default answers sooner), and each session's verdicts with
how they were measured. The issue's goal: the default at least 2x faster end to end.

Run: python benchmarks/end_to_end_apply.py [--pairs 2] [--models cnn_slow_dataloader,...]
     [--burner]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from _common import ROOT, Burner, conditions, machine_line, out, run_child, spread

MODELS = ("cnn_slow_dataloader", "gpt_char_lm", "tabular_mlp_debug")
ARMS = {"default": (), "re-runs": ("--re-runs",)}


def session(model: str, arm: str, work: Path, n: int) -> dict:
    script = ROOT / "sample_models" / f"{model}.py"
    cmd = [sys.executable, "-m", "perfdoctor", "profile", "--json", "--quiet", *ARMS[arm]]
    cmd += ["-o", str(work / f"{model}-{arm}-{n}"), str(script)]
    res = run_child(cmd, cwd=ROOT, timeout_s=1800)
    row: dict = {"wall_s": res.wall_s, "rc": res.returncode, "verdicts": "?"}
    try:
        report = json.loads(res.stdout)
    except ValueError:
        row["verdicts"] = "no report: " + (res.stderr.strip().splitlines() or ["-"])[-1]
        return row
    parts = []
    for v in report.get("variants", []):
        speed = f" {v['speedup']:.2f}x" if v.get("speedup") else ""
        parts.append(f"{v['label']} {v['verdict']}{speed} ({v.get('method') or 're-runs'})")
    row["verdicts"] = "; ".join(parts) or "no variant"
    row.update(children(work / f"{model}-{arm}-{n}"))
    shutil.rmtree(work / f"{model}-{arm}-{n}", ignore_errors=True)
    return row


def children(out_dir: Path) -> dict:
    """Where a session's time went: its child runs (count, wall), the A/B child's share and
    the measurement time inside it."""
    runs, wall, ab_wall, ab_measure = 0, 0.0, 0.0, 0.0
    for manifest in out_dir.rglob("manifest.json"):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        runs += 1
        wall += float(data.get("wall_s") or 0.0)
        ab_file = manifest.with_name("ab.json")
        if ab_file.is_file():
            ab_wall += float(data.get("wall_s") or 0.0)
            with contextlib.suppress(OSError, ValueError):
                ab_measure += float(json.loads(ab_file.read_text()).get("measure_s") or 0.0)
    return {"runs": runs, "child_s": wall, "ab_child_s": ab_wall, "ab_measure_s": ab_measure}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--burner", action="store_true", help="one CPU burner for the duration")
    opts = p.parse_args()
    models = [m.strip() for m in opts.models.split(",") if m.strip()]
    out(machine_line())
    out(f"{opts.pairs} pairs per model; {'one CPU burner' if opts.burner else 'no burner'}")
    work = Path(tempfile.mkdtemp(prefix="pd-e2e-"))
    results: dict[str, dict[str, list[dict]]] = {}
    try:
        with Burner(opts.burner):
            for model in models:
                out(f"\n{model}")
                out(f"  before: {conditions()}")
                arms: dict[str, list[dict]] = {"default": [], "re-runs": []}
                for k in range(opts.pairs):
                    order = ("default", "re-runs") if k % 2 == 0 else ("re-runs", "default")
                    for arm in order:
                        row = session(model, arm, work, k)
                        arms[arm].append(row)
                        out(
                            f"  pair {k + 1} {arm:<8} {row['wall_s']:6.1f} s rc {row['rc']}: "
                            f"{row['verdicts']}"
                        )
                        if "runs" in row:
                            out(
                                f"      {row['runs']} child runs, {row['child_s']:.1f} s in "
                                f"children; A/B child {row['ab_child_s']:.1f} s, of which "
                                f"{row['ab_measure_s']:.1f} s measured"
                            )
                out(f"  after: {conditions()}")
                results[model] = arms
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out()
    out("| model | default (in-process) | `--re-runs` | re-runs / default, paired |")
    out("|---|---|---|---|")
    for model, arms in results.items():
        d = [r["wall_s"] for r in arms["default"]]
        r_ = [r["wall_s"] for r in arms["re-runs"]]
        ratios = spread([b / a for a, b in zip(d, r_, strict=True)])
        out(
            f"| {model} | {', '.join(f'{x:.0f} s' for x in d)} | "
            f"{', '.join(f'{x:.0f} s' for x in r_)} | {ratios.fmt(2, 'x') if ratios else '-'} |"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
