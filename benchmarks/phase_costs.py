"""Where perfdoctor's per-step cost lands: each call of the step, plain against perfdoctor.

    python benchmarks/phase_costs.py [--rounds 4] [--steps 1500]

`_peer_steps.py` with PEER_PHASES=1 times each of its step's calls with perf_counter:
zero_grad, the model's forward, the loss, backward, the optimizer step. Plain and
`perfdoctor profile --no-apply --profile-steps 0 --run-to-end` (every step observed) start
together on core 0 with their loops held to the same moment, as in `overhead.py
--same-core`; the order alternates between rounds. Reported per step size: each call's
median wall time in each arm, and what perfdoctor added to it (median over the rounds of
the within-pair difference). perfdoctor's hooks run inside these calls (the step change and
the root's hooks inside the forward, the backward wrapper inside backward, the optimizer
hooks inside the step): a call that gains more on the MLP than on the null step, for the
same hooks, is torch's own work running slower after perfdoctor's code.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import machine_line, out
from overhead import LATE_S, PEER_MODELS, peer_command, start_together
from python_work_cost import LEAD_S

NAMES = ("zero_grad", "forward", "loss", "backward", "step")
ARMS = ("plain", "perfdoctor")


def one_pair(model: str, steps: int, where: Path, order: tuple[str, str]) -> dict | None:
    """Both arms' per-call medians (us), or None when the loops did not start together."""
    start_at = time.time() + LEAD_S
    specs = []
    for arm in order:
        command, env, result = peer_command(arm, model, steps, where, None, start_at)
        specs.append((arm, command, {**env, "PEER_PHASES": "1"}, result))
    first, second = start_together(specs, model, where, start_at, same_core=True)
    got = dict(zip(order, (first, second), strict=True))
    if max(abs(r["late_s"]) for r in got.values()) > LATE_S:
        return None
    return {arm: got[arm]["phase_us"] for arm in ARMS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1500, help="steps per run")
    args = parser.parse_args()
    out(machine_line())
    out(
        f"phase costs: {args.rounds} rounds of {args.steps} steps, plain beside perfdoctor on "
        "core 0, each call's median wall time (us)"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="pd-phases-") as tmp:
        for model in PEER_MODELS:
            pairs = []
            for r in range(args.rounds):
                got = one_pair(model, args.steps, Path(tmp), ARMS if r % 2 == 0 else ARMS[::-1])
                if got is None:
                    out(f"  round {r + 1} {model}: loops did not start together (left out)")
                    continue
                pairs.append(got)
                added = [p - q for p, q in zip(got["perfdoctor"], got["plain"], strict=True)]
                out(f"  round {r + 1} {model}: added " + ", ".join(
                    f"{n} {a:+.0f}" for n, a in zip(NAMES, added, strict=True)))  # fmt: skip
            if pairs:
                rows.append((model, pairs))
    out("")
    out("| step | arm | " + " | ".join(NAMES) + " | sum |")
    out("|---|---|" + "---|" * (len(NAMES) + 1))
    for model, pairs in rows:
        for arm in ARMS:
            medians = [statistics.median(p[arm][k] for p in pairs) for k in range(len(NAMES))]
            cells = " | ".join(f"{m:.1f}" for m in medians)
            out(f"| {model} | {arm} | {cells} | {sum(medians):.1f} |")
        added = [
            statistics.median(p["perfdoctor"][k] - p["plain"][k] for p in pairs)
            for k in range(len(NAMES))
        ]
        cells = " | ".join(f"**{a:+.1f}**" for a in added)
        out(f"| {model} | added (n={len(pairs)}) | {cells} | {sum(added):+.1f} |")
    out(machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
