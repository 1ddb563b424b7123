"""What a fixed amount of plain Python work between a step's calls costs the step (issue 30).

    python benchmarks/python_work_cost.py [--work 600] [--kind objects|arithmetic|spread]

perfdoctor's per-step cost is Python run between torch's ops (hooks, the step change). Its
instructions price the null step (benchmarks/step_instructions.py), but the MLP step pays
more than the null step for the same calls (`overhead.py --calls`: the same 35 calls a
step on both). This asks whether any Python work does that, with no perfdoctor at all:
`_peer_steps.py` plain, against `_peer_steps.py` with PEER_PYTHON_WORK (a loop of dict,
tuple and list work, a quarter before each of the step's four calls), both started together
on core 0 with their loops held to the same moment, each read by its process's CPU time per
step (the design of `overhead.py --same-core`). Reported per step size: the CPU the work
added to the step; the work's own time inside the loop (perf_counter around each part); the
same work timed alone after the loop; and the difference of the first two: what torch's
own ops lost to the Python run between them (caches refilled), on this core shared with
the other arm. `--kind objects` (default)
builds and stores a tuple and appends to a list each iteration, as hooks' bookkeeping does;
`--kind arithmetic` runs a loop of the same length on local integers only; `--kind spread`
reads one of 32,768 objects each iteration, each step other ones (a footprint in the caches,
as many functions' code and dicts have).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import machine_line, out, spread
from overhead import LATE_S, PEER_MODELS, fmt, peer_command, start_together

# Seconds before the two loops start: time for both processes to import torch (about 3 s of
# CPU each on this guest) on a machine with other work.
LEAD_S = 15.0


def one_pair(model: str, steps: int, work: int, kind: str, where: Path, first: str) -> dict | None:
    """plain and the worked arm side by side on core 0; None if they did not overlap."""
    start_at = time.time() + LEAD_S
    specs = []
    for arm in (first, "worked" if first == "plain" else "plain"):
        command, env, result = peer_command("plain", model, steps, where, None, start_at, tag=arm)
        if arm == "worked":
            env = {**env, "PEER_PYTHON_WORK": str(work), "PEER_PYTHON_WORK_KIND": kind}
        specs.append((arm, command, env, result))
    a, b = start_together(specs, model, where, start_at, same_core=True)
    got = dict(zip((specs[0][0], specs[1][0]), (a, b), strict=True))
    if max(abs(got["plain"]["late_s"]), abs(got["worked"]["late_s"])) > LATE_S:
        return None
    return {
        "plain_ms": got["plain"]["cpu_median_ms"],
        "added_us": (got["worked"]["cpu_median_ms"] - got["plain"]["cpu_median_ms"]) * 1000.0,
        "own_us": got["worked"]["python_work_us"],
        "in_loop_us": got["worked"]["python_work_in_loop_us"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=int, default=600, help="iterations of work a step")
    parser.add_argument("--kind", choices=("objects", "arithmetic", "spread"), default="objects")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1500, help="steps per run")
    args = parser.parse_args()
    out(machine_line())
    out(
        f"python work ({args.kind}): {args.work} iterations a step, {args.rounds} rounds of "
        f"{args.steps} steps, plain beside worked on core 0 (CPU time per step)"
    )
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="pd-pywork-") as tmp:
        for r in range(args.rounds):
            for model in PEER_MODELS:
                first = "plain" if r % 2 == 0 else "worked"
                got = one_pair(model, args.steps, args.work, args.kind, Path(tmp), first)
                if got is None:
                    out(f"  round {r + 1} {model}: loops did not start together (left out)")
                    continue
                results.setdefault(model, []).append(got)
                out(
                    f"  round {r + 1} {model}: plain {got['plain_ms']:.3f} ms, the work added "
                    f"{got['added_us']:.0f} us, its own {got['in_loop_us']:.0f} us in the loop, "
                    f"{got['own_us']:.0f} us alone"
                )
    out("")
    out(
        "| step | plain | the work added | the work in the loop | the work alone "
        "| torch's ops lost (added - in the loop) |"
    )
    out("|---|---|---|---|---|---|")
    for model, rows in results.items():
        out(
            f"| {model} | {statistics.median(r['plain_ms'] for r in rows):.3f} ms | "
            f"{fmt(spread([r['added_us'] for r in rows]), 0, ' us')} | "
            f"{fmt(spread([r['in_loop_us'] for r in rows]), 0, ' us')} | "
            f"{fmt(spread([r['own_us'] for r in rows]), 0, ' us')} | "
            f"{fmt(spread([r['added_us'] - r['in_loop_us'] for r in rows]), 0, ' us')} |"
        )
    out(machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
