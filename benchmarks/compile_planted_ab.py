"""What perfdoctor prices each planted compile problem at, against what removing it by hand
buys, measured side by side (ratios and figures printed, nothing asserted).

Per round and issue: one `perfdoctor profile --no-apply` of the planted script (its compile
section's price of the issue), then the plain script with the issue and with it removed by
hand (PLANTED_NO_* in tests/integration/scripts/compile_planted.py), alternating A B A B.
What removing it buys = 1 - median step (removed) / median step (planted), in CPU time with one
compute thread (and in wall time, printed beside it); the price as a share of perfdoctor's
median step. The load average is printed beside each figure.

The `disable`d helper's price from one run is an upper bound; perfdoctor measures what lifting
it buys with its `compile-lift-disable` variant (the helper
traced into the graph or not, by alternating re-runs). For that issue the profile runs with
`--only compile-lift-disable --repeat 3` instead of `--no-apply`, and the variant's share
(1 - 1 / speedup, with its interval) is printed beside the bound and the hand removal.

    PYTHONPATH=. python benchmarks/compile_planted_ab.py --rounds 2 [--only disable --pairs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "compile_planted.py"
# Which issue of the compile section each removal fixes: (kind, cause substring).
ISSUE = {
    "storm": ("recompile", "Python number"),
    "disable": ("graph_break", "disable"),
    "item": ("graph_break", "item()"),
}


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


# One compute thread everywhere: a process's CPU time is then its step's work, which other
# processes' load moves far less than its wall time (this 2-core machine ran at load 12-19).
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def plain(flags: tuple[str, ...], steps: int) -> tuple[float, float]:
    """The median step's CPU ms and wall ms of the plain script."""
    env = {**ENV, "PLANTED_STEPS": str(steps), **dict.fromkeys(flags, "1")}
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    ).stdout
    cpu = re.search(r"median_step_cpu_ms=([\d.]+)", out)
    wall = re.search(r"median_step_ms=([\d.]+)", out)
    assert cpu and wall, out
    return float(cpu.group(1)), float(wall.group(1))


LIFT = "compile-lift-disable"
REPEAT = 3  # A/B rounds of the lift variant (baseline and lifted runs alternating)


def alternate(flags: tuple[str, ...], steps: int = 420, block: int = 10) -> dict[str, float]:
    """The disable removed by hand in every other block of one process (the planted script's
    PLANTED_ALTERNATE_DISABLE): per pair of blocks, 1 - removed / planted median step; the
    median over the pairs, in CPU time and in wall time (the statistic perfdoctor's A/B uses)."""
    env = {**ENV, "PLANTED_STEPS": str(steps), "PLANTED_ALTERNATE_DISABLE": str(block)}
    env.update(dict.fromkeys(flags, "1"))
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(r"alternate (\w+)_share_median=(-?[\d.]+)", out)
    assert found, out
    return {name: float(value) for name, value in found}


def priced(out_dir: Path, flags: tuple[str, ...], lift: bool = False) -> dict[str, Any]:
    env = {**ENV, "PLANTED_STEPS": "60", **dict.fromkeys(flags, "1")}
    # The lift is measured by re-runs (not switchable: collect/appliers/compile_disable.py).
    apply = ["--only", LIFT, "--repeat", str(REPEAT)] if lift else ["--no-apply"]
    subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", *apply, "--quiet", "-o",
         str(out_dir), str(SCRIPT)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(next(out_dir.glob("*/report.json")).read_text())
    variant = next((v for v in report.get("variants") or [] if v["label"] == LIFT), None)
    issues = report["series"]["compile"]["baseline"]["issues"]
    prices: dict[str, Any] = {}
    for name, (kind, cause) in ISSUE.items():
        found = [i for i in issues if i["kind"] == kind and cause in i["cause"]]
        prices[name] = found[0]["cost_ms_per_step"] if found else None
    prices["ranking"] = [f"{i['kind']}@{i['where']}" for i in issues if i["cost_ms_per_step"]]
    prices["step_ms"] = report["facts"]["step_ms_p50"]
    if variant is not None and variant.get("speedup"):
        low, high = variant.get("interval") or (None, None)
        prices["lift"] = {
            "share": 1.0 - 1.0 / variant["speedup"],
            "low": 1.0 - 1.0 / low if low else None,
            "high": 1.0 - 1.0 / high if high else None,
            "pairs": variant.get("pairs"),
            "verdict": variant.get("verdict"),
            "ms": f"{variant['baseline_step_ms_p50']:.2f} -> {variant['step_ms_p50']:.2f}",
        }
    return prices


# (issue, flags of the run it is priced in and measured against, the flag that removes it).
# The breaks are measured with the storm already removed: the storm recompiles the frame
# after the last break, and removing a break grows that frame, so with the storm present
# removing a break makes each recompile dearer (measured: -828 ms, round 0 of the first run).
CASES = (
    ("storm", (), "PLANTED_NO_STORM"),
    ("disable", ("PLANTED_NO_STORM",), "PLANTED_NO_DISABLE"),
    ("item", ("PLANTED_NO_STORM", "PLANTED_NO_DISABLE"), "PLANTED_NO_ITEM"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--only", default="", help="comma-separated issues (default: all)")
    parser.add_argument("--pairs", type=int, default=2, help="A B pairs of the plain script")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for name, flags, removal in CASES:
            if only and name not in only:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                load_p = loadavg()
                prices = priced(Path(tmp), flags, lift=name == "disable")
            # A B A B: the planted and the fixed script alternate.
            base, fixed, loads = [], [], []
            for _ in range(args.pairs):
                loads.append(loadavg())
                base.append(plain(flags, args.steps))
                loads.append(loadavg())
                fixed.append(plain((*flags, removal), args.steps))
            # Shares of the step: the priced run and the plain runs saw different loads.
            planted = statistics.median(b[0] for b in base)
            bought = (planted - statistics.median(f[0] for f in fixed)) / planted
            planted_wall = statistics.median(b[1] for b in base)
            bought_wall = (planted_wall - statistics.median(f[1] for f in fixed)) / planted_wall
            price = prices[name] / prices["step_ms"] if prices[name] is not None else None
            ratio = price / bought if price is not None and bought > 0 else None
            lift = prices.get("lift")
            paired = alternate(flags) if name == "disable" else None
            row = {"issue": name, "bought": bought, "bought_wall": bought_wall, "price": price}
            if lift is not None:
                row["lift"] = lift["share"]
            if paired is not None:
                row["paired_cpu"], row["paired_wall"] = paired["cpu"], paired["wall"]
            rows.append(row)
            print(
                f"round {r} {name}: priced {prices[name]} ms of a {prices['step_ms']:.1f} ms "
                f"step = {price} (load {load_p}; ranking {prices['ranking']}); planted "
                f"{base} (CPU, wall) ms, fixed {fixed} -> buys {bought:.4f} of the step in CPU "
                f"time, {bought_wall:.4f} in wall time; priced/bought {ratio}; loads {loads}"
                + (
                    f"; measured by {LIFT}: {lift['share']:.4f} [{lift['low']}, {lift['high']}]"
                    f" ({lift['ms']} ms, {lift['pairs']} pairs, {lift['verdict']}); "
                    f"measured/bought {lift['share'] / bought if bought > 0 else None}"
                    if lift is not None
                    else ""
                )
                + (
                    f"; removed by hand in alternate blocks of one process: {paired['cpu']:.4f}"
                    f" (CPU), {paired['wall']:.4f} (wall)"
                    if paired is not None
                    else ""
                ),
                flush=True,
            )
    for name, _, _ in CASES:
        got = [x for x in rows if x["issue"] == name]
        if got:
            bought = statistics.median(x["bought"] for x in got)
            wall = statistics.median(x["bought_wall"] for x in got)
            prices_ = [x["price"] for x in got if x["price"] is not None]
            price = statistics.median(prices_) if prices_ else None
            lifts = [x["lift"] for x in got if "lift" in x]
            lift = f", measured {statistics.median(lifts):.4f}" if lifts else ""
            if any("paired_cpu" in x for x in got):
                pc = statistics.median(x["paired_cpu"] for x in got if "paired_cpu" in x)
                pw = statistics.median(x["paired_wall"] for x in got if "paired_wall" in x)
                lift += f"; by hand in one process {pc:.4f} (CPU), {pw:.4f} (wall)"
            print(
                f"median over rounds: {name}: buys {bought:.4f} (CPU), {wall:.4f} (wall), "
                f"priced {price}{lift} of the step"
            )


if __name__ == "__main__":
    main()
