"""Issue 12: what the process-tree hook costs a Python process that never trains.

Every Python process a profiled script starts imports perfdoctor's sitecustomize
(perfdoctor/collect/inject/). This starts `python -c pass` -- and, for scale, a child that
imports torch without training (where the probes are installed, lazily: a DataLoader worker,
a checkpoint writer) -- with and without the hook, in paired alternating rounds
(plain, hooked / hooked, plain), and prints the median wall time of each arm and the median
of the paired differences. Budget: 20 ms for `python -c pass`.

    python benchmarks/process_tree_startup.py [--rounds 40] [--torch-rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine_line, out, spread

from perfdoctor.collect.tree_settle import tree_env
from perfdoctor.model import RunSpec, Target
from perfdoctor.rundir import SPEC_FILE, write_json


def once(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms = user + sys) of one child, from a blocking wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, command
    return (time.perf_counter() - start) * 1000, (usage.ru_utime + usage.ru_stime) * 1000


def paired(command: list[str], rounds: int, plain: dict[str, str], hooked: dict[str, str]):
    arms: dict[str, list[tuple[float, float]]] = {"plain": [], "hooked": []}
    for k in range(rounds):
        order = ("plain", "hooked") if k % 2 == 0 else ("hooked", "plain")
        for arm in order:
            arms[arm].append(once(command, plain if arm == "plain" else hooked))
    return arms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--torch-rounds", type=int, default=6)
    args = parser.parse_args()
    out(machine_line())
    with tempfile.TemporaryDirectory() as run_dir:
        plain = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        plain["PYTHONPATH"] = os.pathsep.join(p for p in (root, plain.get("PYTHONPATH")) if p)
        spec = RunSpec(
            label="baseline",
            target=Target(kind="script", name="train.py"),
            cwd=run_dir,
            run_dir=run_dir,
        )
        write_json(Path(run_dir) / SPEC_FILE, spec)  # as in a run: torch importers activate
        hooked = tree_env(Path(run_dir), plain)
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"], args.rounds),
            ("python -c 'import torch'", [sys.executable, "-c", "import torch"], args.torch_rounds),
        ]
        for name, command, rounds in cases:
            once(command, plain)  # warm the page cache
            arms = paired(command, rounds, plain, hooked)
            for what, i in (("wall", 0), ("CPU (user+sys)", 1)):
                a = [x[i] for x in arms["plain"]]
                b = [x[i] for x in arms["hooked"]]
                diffs = [y - x for x, y in zip(a, b, strict=True)]
                out(
                    f"{name} {what}: plain {spread(a).fmt(1, ' ms')}, "
                    f"hooked {spread(b).fmt(1, ' ms')}, paired extra median "
                    f"{statistics.median(diffs):+.1f} ms"
                )


if __name__ == "__main__":
    main()
