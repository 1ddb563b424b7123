"""What perfdoctor prices each planted compile problem at, against what removing it by hand
buys, measured side by side (ratios and figures printed, nothing asserted).

Per round and issue: one `perfdoctor profile --no-apply` of the planted script (its compile
section's price of the issue), then the plain script with the issue and with it removed by
hand (PLANTED_NO_* in tests/integration/scripts/compile_planted.py), alternating A B A B.
What removing it buys = 1 - median step (removed) / median step (planted), in CPU time with one
compute thread; the price as a share of perfdoctor's median step. The load average is printed
beside each figure.

    PYTHONPATH=. python benchmarks/compile_planted_ab.py --rounds 2
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


def plain(flags: tuple[str, ...], steps: int) -> float:
    """The median step's CPU ms of the plain script."""
    env = {**ENV, "PLANTED_STEPS": str(steps), **dict.fromkeys(flags, "1")}
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r"median_step_cpu_ms=([\d.]+)", out)
    assert m, out
    return float(m.group(1))


def priced(out_dir: Path, flags: tuple[str, ...]) -> dict[str, Any]:
    env = {**ENV, "PLANTED_STEPS": "60", **dict.fromkeys(flags, "1")}
    subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", "--quiet", "-o",
         str(out_dir), str(SCRIPT)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    report = json.loads(next(out_dir.glob("*/report.json")).read_text())
    issues = report["series"]["compile"]["baseline"]["issues"]
    prices: dict[str, Any] = {}
    for name, (kind, cause) in ISSUE.items():
        found = [i for i in issues if i["kind"] == kind and cause in i["cause"]]
        prices[name] = found[0]["cost_ms_per_step"] if found else None
    prices["ranking"] = [f"{i['kind']}@{i['where']}" for i in issues if i["cost_ms_per_step"]]
    prices["step_ms"] = report["facts"]["step_ms_p50"]
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
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for name, flags, removal in CASES:
            if only and name not in only:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                load_p = loadavg()
                prices = priced(Path(tmp), flags)
            # A B A B: the planted and the fixed script alternate, each twice.
            base, fixed, loads = [], [], []
            for _ in range(2):
                loads.append(loadavg())
                base.append(plain(flags, args.steps))
                loads.append(loadavg())
                fixed.append(plain((*flags, removal), args.steps))
            # Shares of the step: the priced run and the plain runs saw different loads.
            planted = statistics.median(base)
            bought = (planted - statistics.median(fixed)) / planted
            price = prices[name] / prices["step_ms"] if prices[name] is not None else None
            ratio = price / bought if price is not None and bought > 0 else None
            rows.append({"issue": name, "bought": bought, "price": price})
            print(
                f"round {r} {name}: priced {prices[name]} ms of a {prices['step_ms']:.1f} ms "
                f"step = {price} (load {load_p}; ranking {prices['ranking']}); planted {base} "
                f"CPU ms, fixed {fixed} CPU ms -> buys {bought:.4f} of the step; priced/bought "
                f"{ratio}; loads {loads}",
                flush=True,
            )
    for name, _, _ in CASES:
        got = [x for x in rows if x["issue"] == name]
        if got:
            bought = statistics.median(x["bought"] for x in got)
            prices_ = [x["price"] for x in got if x["price"] is not None]
            price = statistics.median(prices_) if prices_ else None
            print(f"median over rounds: {name}: buys {bought:.4f}, priced {price} of the step")


if __name__ == "__main__":
    main()
