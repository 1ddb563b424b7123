"""CleanRL c51: what picking actions under torch.no_grad() buys (issue 24's corpus).

c51.py picks its actions with `q_network.get_action(...)` outside torch.no_grad(), so every
greedy pick builds an autograd graph no backward uses (perfdoctor's grad-without-backward).
The script is extracted at its pinned commit (as public_scripts.py does); a copy wraps that
one line in `with torch.no_grad():`. Both run alternately (A B A B ...), each in its own
process, with the corpus's arguments, and the table gives the median over runs of the
script's own throughput (steps per second, over the whole run) and of its wall time.

    python benchmarks/public_c51_nograd.py --mirror DIR [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_line, out
from public_scripts import CLEANRL, extract

ACTION_LINE = "            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device))\n"
NO_GRAD = (
    "            with torch.no_grad():\n"
    "                actions, pmf = q_network.get_action(torch.Tensor(obs).to(device))\n"
)
ARGS = ("--total-timesteps", "6000", "--learning-starts", "500", "--train-frequency", "1")


def run(tree: Path, script: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_MODE": "disabled"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, f"cleanrl/{script}", *ARGS],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.monotonic() - t0
    sps = [int(m) for m in re.findall(r"^SPS: (\d+)", proc.stdout, re.M)]
    if proc.returncode != 0 or not sps:
        raise SystemExit(f"{script}: rc {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return float(sps[-1]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out(machine_line())
    with tempfile.TemporaryDirectory(prefix="pd-c51-") as tmp:
        tree = Path(tmp)
        extract(args.mirror / "vwxyzjn+cleanrl" / "repo", CLEANRL[1], ("",), tree)
        source = (tree / "cleanrl" / "c51.py").read_text()
        if source.count(ACTION_LINE) != 1:
            raise SystemExit("c51.py: the action line is not as expected at the pinned commit")
        (tree / "cleanrl" / "c51_nograd.py").write_text(source.replace(ACTION_LINE, NO_GRAD))
        rows: dict[str, list[tuple[float, float, float]]] = {"c51.py": [], "c51_nograd.py": []}
        for _ in range(args.rounds):
            for script in rows:
                load = os.getloadavg()[0]
                sps, wall = run(tree, script)
                rows[script].append((sps, wall, load))
    out("| variant | runs | SPS (median) | wall s (median) | load at start |")
    out("|---|---|---|---|---|")
    for script, runs in rows.items():
        sps = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        loads = "-".join(f"{r[2]:.1f}" for r in runs)
        out(f"| {script} | {len(runs)} | {sps:.0f} | {wall:.1f} | {loads} |")


if __name__ == "__main__":
    main()
