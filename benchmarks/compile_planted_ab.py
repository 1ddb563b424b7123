"""What perfdoctor prices each planted compile problem at, against what removing it by hand
buys, measured side by side (ratios and figures printed, nothing asserted).

Per round, in this order: one `perfdoctor profile --no-apply` of the planted script (its
compile section's price of each issue), then the plain script with everything planted and
with each problem removed by hand (PLANTED_NO_* in tests/integration/scripts/
compile_planted.py). What removing X buys = median step (all planted) - median step (X
removed), from the same round. The load average is printed beside each figure.

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

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "integration" / "scripts" / "compile_planted.py"
REMOVALS = {"storm": "PLANTED_NO_STORM", "disable": "PLANTED_NO_DISABLE", "item": "PLANTED_NO_ITEM"}
# Which issue of the compile section each removal fixes: (kind, cause substring).
ISSUE = {
    "storm": ("recompile", "Python number"),
    "disable": ("graph_break", "disable"),
    "item": ("graph_break", "item()"),
}


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def plain(env_flag: str | None, steps: int) -> float:
    env = {**os.environ, "PLANTED_STEPS": str(steps)}
    if env_flag:
        env[env_flag] = "1"
    out = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    ).stdout
    m = re.search(r"median_step_ms=([\d.]+)", out)
    assert m, out
    return float(m.group(1))


def priced(out_dir: Path) -> dict[str, float | None]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "perfdoctor",
            "profile",
            "--no-apply",
            "--quiet",
            "-o",
            str(out_dir),
            str(SCRIPT),
        ],
        env={**os.environ, "PLANTED_STEPS": "60"},
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(next(out_dir.glob("*/report.json")).read_text())
    issues = report["series"]["compile"]["baseline"]["issues"]
    prices: dict[str, float | None] = {}
    for name, (kind, cause) in ISSUE.items():
        found = [i for i in issues if i["kind"] == kind and cause in i["cause"]]
        if name == "item":
            found = [i for i in found if "item()" in (i["code"] or "")] or found
        prices[name] = found[0]["cost_ms_per_step"] if found else None
    prices["ranking"] = [f"{i['kind']}@{i['where']}" for i in issues]  # type: ignore[assignment]
    return prices


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            load = loadavg()
            prices = priced(Path(tmp))
        print(f"round {r}: perfdoctor prices (ms/step) {prices} load {load}", flush=True)
        base_load = loadavg()
        base = plain(None, args.steps)
        print(f"round {r}: all planted median step {base:.1f} ms load {base_load}", flush=True)
        for name, flag in REMOVALS.items():
            load = loadavg()
            fixed = plain(flag, args.steps)
            bought = base - fixed
            price = prices[name]
            ratio = price / bought if isinstance(price, float) and bought > 0 else None
            rows.append({"round": r, "issue": name, "bought_ms": bought, "priced_ms": price})
            print(
                f"round {r}: {name:8s} removed: median {fixed:.1f} ms, buys {bought:.1f} ms, "
                f"priced {price} ms, priced/bought {ratio} load {load}",
                flush=True,
            )
    for name in REMOVALS:
        bought = statistics.median(float(x["bought_ms"]) for x in rows if x["issue"] == name)  # type: ignore[arg-type]
        got = [x["priced_ms"] for x in rows if x["issue"] == name and x["priced_ms"] is not None]
        price = statistics.median(float(p) for p in got) if got else None  # type: ignore[arg-type]
        print(f"median over rounds: {name}: buys {bought:.1f} ms, priced {price} ms")


if __name__ == "__main__":
    main()
