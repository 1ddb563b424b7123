"""A change's per-step cost against another revision's, both on one core (issue 30).

    python benchmarks/checkout_ab.py --a HEAD~1 --b . [--model mlp|null] [--rounds 6]
    python benchmarks/checkout_ab.py --a plain --b . --plan-steps 300 --peer-steps 3000 \\
        --skip 1000                       # the steps after perfdoctor's plan ended

Each arm is `plain` (the script alone), `.` (this checkout) or a git revision (checked out
into a temporary worktree and byte-compiled, as tools/install.sh does). Every round starts
both arms together on core 0 (taskset), each holding `_peer_steps.py`'s loop until the same
moment, and compares the CPU time per step each process measured itself (the median after
`--skip` steps; `--mean`: the mean, where costs that come in bursts on a few steps count):
the guest's drift from second to second falls on both, where sequential runs moved +-40%
(benchmarks/README.md, session 5). perfdoctor runs as
`profile --no-apply --profile-steps 0 --run-to-end` with a plan of `--plan-steps` steps
(default: the whole script). Pairs whose loops did not start within 0.5 s are shown and
left out; the order of the two arms alternates between rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, machine_line, out
from overhead import LATE_S, peer_command, start_together


def checkout(rev: str, work: Path) -> Path:
    """The tree an arm imports perfdoctor from: this checkout, or `rev` in a worktree."""
    if rev == ".":
        return ROOT
    tree = work / f"tree-{len(list(work.glob('tree-*')))}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), rev],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", str(tree / "perfdoctor")], check=True
    )
    return tree


def run_pair(
    arms: list[tuple[str, Path | None]], args: argparse.Namespace, work: Path
) -> dict[str, dict]:
    """One round: both arms started together on core 0 (overhead.start_together)."""
    start_at = time.time() + args.lead
    specs = []
    for k, (name, tree) in enumerate(arms):
        command, env, result = peer_command(
            "plain" if tree is None else "perfdoctor", args.model, args.peer_steps, work, None,
            start_at, tree=tree or ROOT, plan_steps=args.plan_steps or None, skip=args.skip,
            tag=f"arm{k}",
        )  # fmt: skip
        specs.append((name, command, env, result))
    first, second = start_together(specs, args.model, work, start_at, same_core=True)
    return {arms[0][0]: first, arms[1][0]: second}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default="plain", help="plain, . or a git revision")
    parser.add_argument("--b", default=".", help="plain, . or a git revision")
    parser.add_argument("--model", default="mlp", choices=("mlp", "null"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--peer-steps", type=int, default=1500, help="steps the script runs")
    parser.add_argument("--skip", type=int, default=50, help="steps left out of each median")
    parser.add_argument("--plan-steps", type=int, default=0, help="perfdoctor's plan (0: all)")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds both arms wait")
    parser.add_argument(
        "--mean",
        action="store_true",
        help="compare the mean CPU time per step (bursts on a few steps count), not the median",
    )
    args = parser.parse_args(argv)
    key = "cpu_mean_ms" if args.mean else "cpu_median_ms"
    if shutil.which("taskset") is None:
        raise SystemExit("taskset not found (util-linux)")
    work = Path(tempfile.mkdtemp(prefix="checkout-ab-"))
    names = [args.a, args.b]
    if names[0] == names[1]:
        names = [f"{args.a} (1)", f"{args.b} (2)"]  # an A/A: the harness's own spread
    trees = [None if rev == "plain" else checkout(rev, work) for rev in (args.a, args.b)]
    out(machine_line())
    out(
        f"checkout A/B on one core: {args.a} against {args.b}, {args.model} step, "
        f"{args.peer_steps} steps ({args.skip} left out), plan "
        f"{args.plan_steps or 'the whole script'}, {args.rounds} rounds"
    )
    ratios = []
    try:
        for r in range(args.rounds):
            arms = list(zip(names, trees, strict=True))
            if r % 2:
                arms.reverse()
            got = run_pair(arms, args, work)
            a, b = got[names[0]], got[names[1]]
            late = max(abs(a["late_s"]), abs(b["late_s"]))
            ratio = b[key] / a[key]
            kept = late <= LATE_S
            if kept:
                ratios.append(ratio)
            faults = (f"{a.get('minor_faults_per_step', float('nan')):.2f} / "
                      f"{b.get('minor_faults_per_step', float('nan')):.2f}")  # fmt: skip
            out(f"  round {r + 1}: {names[0]} {a[key]:.4f} ms, {names[1]} "
                f"{b[key]:.4f} ms: {ratio:.4f}x, page faults a step {faults}, late {late:.2f} s"
                f"{'' if kept else ' (left out)'} | load {os.getloadavg()[0]:.1f}")  # fmt: skip
    finally:
        for tree in trees:
            if tree is not None and tree != ROOT:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                    check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    if ratios:
        out(
            f"{names[1]} / {names[0]}, {'mean' if args.mean else 'median'} CPU time per step: "
            f"median of the rounds {statistics.median(ratios):.4f} "
            f"[{min(ratios):.4f}-{max(ratios):.4f}, n={len(ratios)}]"
        )
    else:
        out("no pair kept: every pair started late (a loaded machine: raise --lead)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
