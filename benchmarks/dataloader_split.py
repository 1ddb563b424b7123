"""DataLoader workers beside intra-op threads on a loader-bound step: which split is faster.

The arm script (`_slow_loader_train.py`, plain PyTorch) spends most of each step in
`__getitem__` (fixed pure-Python work per sample) and a little in a small conv net. Each arm
is one (num_workers, intra-op threads) split, run in a fresh process; arms alternate within a
round (A B C D E, then E D C B A) so the machine's drift cancels out, and every ratio is
paired with the baseline of the same round. It prints, it never asserts.

The splits:
  baseline      num_workers=0, the script's threads (torch's default: the cores)
  old sizing    1 worker + 1 thread (the coupled sizing before: workers + threads = cores)
  1 worker      1 worker, the script's threads
  N workers     one worker per usable core, the script's threads: what optimize/sizing.py
                chooses when loading dominates (the dataloader-workers variant now)
  N workers + 1 thread   the same with the threads the budget leaves (cores - workers,
                at least 1): what cpu-threads stacked with it runs (the coupled change)
  sized         what the sizing chooses from a calibration run's measured split (its data
                wait vs compute per step), when that is none of the above

    python benchmarks/dataloader_split.py [--rounds 4] [--steps 30] [--work 8000]
    python -c "while True: pass" &  # a CPU burner for the busy case; kill it after
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from _common import ROOT, machine_line, out, run_child, spread

from perfdoctor.model import Facts
from perfdoctor.optimize.sizing import budget_threads, size_dataloader_workers

ARM_SCRIPT = Path(__file__).resolve().parent / "_slow_loader_train.py"


def run_arm(args: argparse.Namespace, workers: int, threads: int) -> dict:
    command = [
        sys.executable, str(ARM_SCRIPT), "--workers", str(workers), "--threads", str(threads),
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--work", str(args.work),
        "--width", str(args.width), "--batch-size", str(args.batch_size),
    ]  # fmt: skip
    result = run_child(command, cwd=ROOT, timeout_s=args.timeout)
    if result.returncode != 0:
        raise SystemExit(f"arm {workers}w/{threads}t failed: {result.stderr.strip()[-400:]}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "step": statistics.median(data["step_ms"]),
        "wait": statistics.median(data["wait_ms"]),
        "threads": data["threads"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--work", type=int, default=8000, help="loop iterations per sample")
    parser.add_argument("--width", type=int, default=4, help="conv channels (the compute)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per arm run")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    out(machine_line())

    # The sizing sees what a perfdoctor baseline would: the split of a num_workers=0 step.
    calib = run_arm(args, 0, 0)
    facts = Facts(
        {
            "dataloader_num_workers": 0,
            "data_wait_ms_p50": calib["wait"],
            "step_ms_p50": calib["step"],
            "torch_num_threads": calib["threads"],
            "device_is_cuda": False,
        }
    )
    sizing = size_dataloader_workers(facts, cores)
    sized = sizing.workers if sizing is not None else 1
    out(
        f"calibration (num_workers=0): step {calib['step']:.1f} ms, data wait "
        f"{calib['wait']:.1f} ms ({calib['wait'] / calib['step']:.0%}), "
        f"{calib['threads']} threads, {cores} usable cores"
    )
    out(f"sizing: {sizing.summary if sizing is not None else 'none (not measured)'}")

    # Fixed splits, so quiet and busy runs compare the same arms whatever the sizing picks;
    # the sizing's own choice is added when it is none of them.
    budget = budget_threads(cores, cores)
    arms: dict[str, tuple[int, int]] = {
        "baseline": (0, 0),
        "old sizing": (1, 1),
        "1 worker": (1, 0),
        f"{cores} workers": (cores, 0),
        f"{cores} workers + {budget} thread": (cores, budget),
    }
    if (sized, 0) not in arms.values():
        arms["sized"] = (sized, 0)
    chosen = next(label for label, split in arms.items() if split == (sized, 0))
    out(f"the sizing's choice is the arm '{chosen}'; threads 0 = the script's (torch default)")
    labels = list(arms)
    results: dict[str, list[dict]] = {label: [] for label in labels}
    for index in range(args.rounds):
        order = labels if index % 2 == 0 else labels[::-1]
        for label in order:
            results[label].append(run_arm(args, *arms[label]))
        row = ", ".join(f"{label} {results[label][-1]['step']:.1f}" for label in labels)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        out(f"round {index + 1} ({' / '.join(order)}): ms/step {row}; load average {load}")

    out("")
    out("| split | workers | threads | ms/step median [range] | data wait ms | x baseline |")
    out("|---|---|---|---|---|---|")
    base = [r["step"] for r in results["baseline"]]
    for label in labels:
        steps = [r["step"] for r in results[label]]
        ratios = [b / s for b, s in zip(base, steps, strict=True)]
        step_spread, ratio_spread = spread(steps), spread(ratios)
        assert step_spread is not None and ratio_spread is not None
        wait = statistics.median(r["wait"] for r in results[label])
        threads = results[label][0]["threads"]
        out(
            f"| {label} | {arms[label][0]} | {threads} | {step_spread.fmt(1)} | {wait:.1f} | "
            f"{ratio_spread.fmt(2, 'x')} |"
        )
    out(machine_line())


if __name__ == "__main__":
    main()
