"""Does perfdoctor's speedup band cover what the script itself measures?

    python benchmarks/speedup_band.py [--rounds 3] [--steps 100] [--warmup 10] [--threads 1]

The case of issue 14 item 8: tabular_mlp_debug with `anomaly-off`. Two arms, each R rounds:

- perfdoctor: `perfdoctor profile --only anomaly-off --repeat R` (its own A B A B order);
  the verdict's speedup and band from report.json, and from each pair of runs the ratio of
  the median step (what the speedup was built from) and of the mean step (the wall-clock
  time per step, every step counted once).
- in process: CPU time of the training step and of the evaluation forward, anomaly on and
  off interleaved in blocks in one process (benchmarks/_anomaly_phases.py).
- plain: the script as `python script.py` (benchmarks/_plain_steps.py), anomaly on (as
  written) and off (a copy with `set_detect_anomaly(False)`), alternating; per round the
  ratio of the script's own "ms/step" line (elapsed / steps, warm-up included), of the
  median and of the mean timed step.

Every fifth step of this script runs an evaluation forward over 2048 rows, which anomaly
mode slows much less than a training step: a median over steps sees training steps only,
the wall clock sees both. --threads sets OMP_NUM_THREADS for every child (1 by default: on
a machine shared with other jobs, two intra-op threads that wait for each other turn a 4 ms
step into hundreds of ms).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _common import ROOT, SAMPLE_MODELS, machine_line, out, run_child

SCRIPT = SAMPLE_MODELS / "tabular_mlp_debug.py"
ANOMALY_ON = "torch.autograd.set_detect_anomaly(True)"
OWN_LINE = re.compile(r"(\d+) steps in ([\d.]+) s: ([\d.]+) ms/step")


def _ratio(base: Sequence[float], var: Sequence[float], stat) -> float:  # type: ignore[no-untyped-def]
    return stat(base) / stat(var)


def _fmt(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def perfdoctor_arm(tmp: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    from perfdoctor.optimize.compare import estimate_speedup, load_run_sample

    out_dir = tmp / "runs"
    command = [
        sys.executable, "-m", "perfdoctor", "profile", "--only", "anomaly-off",
        "--repeat", str(args.rounds), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--profile-steps", "0", "--quiet", "--out", str(out_dir), str(SCRIPT),
        "--log-every", "1000000", "--max-steps", "1000000",
    ]  # fmt: skip
    result = run_child(command, cwd=tmp, env={**env, "PYTHONPATH": str(ROOT)}, timeout_s=3600)
    if result.returncode != 0:
        out(f"perfdoctor failed ({result.returncode}): {result.stderr[-2000:]}")
        return
    session = (out_dir / "latest").resolve()
    report = json.loads((session / "report.json").read_text())
    variant = next(v for v in report["variants"] if v["label"] == "anomaly-off")
    speedup, noise = variant["speedup"], variant["speedup_noise"]
    out(f"perfdoctor verdict: {speedup:.2f}x ± {noise:.2f} (band {speedup - noise:.2f}..)")
    base_runs = [load_run_sample(d) for d in _run_dirs(session / "baseline")]
    var_runs = [load_run_sample(d) for d in _run_dirs(session / "anomaly-off")]
    pairs = list(zip(base_runs, var_runs, strict=False))
    out(
        "  per round, ratio of median steps: "
        + _fmt([_ratio(b.step_ms, v.step_ms, statistics.median) for b, v in pairs])
    )
    out(
        "  per round, ratio of mean steps:   "
        + _fmt([_ratio(b.step_ms, v.step_ms, statistics.fmean) for b, v in pairs])
    )
    estimate = estimate_speedup(base_runs, var_runs, between_rounds=True)  # as the verdict
    if estimate is not None:
        median_only = math.exp(
            math.log(estimate.speedup) - estimate.bootstrap_half_width - estimate.baseline_spread
        )
        out(
            f"  band from step medians alone (before): {median_only:.2f}..; wall-clock "
            f"speedup {estimate.wall_clock_speedup or math.nan:.2f}x; band with the gap to "
            f"it: {estimate.low:.2f}..{estimate.high:.2f}"
        )


def _run_dirs(arm: Path) -> list[Path]:
    return [arm, *sorted(arm.glob("repeat-*"), key=lambda p: int(p.name.split("-")[1]))]


def plain_arm(tmp: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    source = SCRIPT.read_text()
    if ANOMALY_ON not in source:
        out(f"plain: {SCRIPT.name} no longer has {ANOMALY_ON}")
        return
    off = tmp / SCRIPT.name.replace(".py", "_anomaly_off.py")
    off.write_text(source.replace(ANOMALY_ON, "torch.autograd.set_detect_anomaly(False)"))
    total = args.warmup + args.steps
    own: list[float] = []
    medians: list[float] = []
    means: list[float] = []
    for round_no in range(args.rounds):
        arms = {}
        for name, script in (("on", SCRIPT), ("off", off)):
            path = tmp / f"plain-{name}-{round_no}.json"
            result = run_child(
                [
                    sys.executable, str(ROOT / "benchmarks" / "_plain_steps.py"), str(path),
                    str(script), "--max-steps", str(total), "--log-every", "1000000",
                ],
                cwd=tmp, env=env, timeout_s=1800,
            )  # fmt: skip
            ends = json.loads(path.read_text())["step_ends_s"]
            steps = [1000.0 * (b - a) for a, b in itertools.pairwise(ends)]
            found = OWN_LINE.search(result.stderr + result.stdout)
            arms[name] = (steps[args.warmup :], float(found.group(3)) if found else math.nan)
        (base, base_own), (var, var_own) = arms["on"], arms["off"]
        own.append(base_own / var_own)
        medians.append(_ratio(base, var, statistics.median))
        means.append(_ratio(base, var, statistics.fmean))
    out("plain script, anomaly on / off:")
    out(f"  per round, the script's own ms/step: {_fmt(own)}")
    out(f"  per round, ratio of median steps:    {_fmt(medians)}")
    out(f"  per round, ratio of mean steps:      {_fmt(means)}")


def phases_arm(tmp: Path, env: dict[str, str]) -> None:
    path = tmp / "phases.json"
    result = run_child(
        [sys.executable, str(ROOT / "benchmarks" / "_anomaly_phases.py"), str(path)],
        cwd=tmp,
        env=env,
        timeout_s=1800,
    )
    if result.returncode != 0:
        out(f"in-process arm failed: {result.stderr[-2000:]}")
        return
    ms = json.loads(path.read_text())
    train = ms["train_on"] / ms["train_off"]
    evaluation = ms["eval_on"] / ms["eval_off"]
    every = 5  # the script's --eval-every default
    wall = ((every - 1) * ms["train_on"] + ms["train_on"] + ms["eval_on"]) / (
        (every - 1) * ms["train_off"] + ms["train_off"] + ms["eval_off"]
    )
    out("in process, CPU time, anomaly on / off interleaved (median ms):")
    out(
        f"  training step {ms['train_on']:.2f} / {ms['train_off']:.2f} = {train:.2f}x; "
        f"evaluation forward {ms['eval_on']:.2f} / {ms['eval_off']:.2f} = {evaluation:.2f}x"
    )
    out(
        f"  median step (a training step): {train:.2f}x; time per step with one evaluation "
        f"every {every} steps: {wall:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    env = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    out(machine_line())
    out(f"{SCRIPT.name}, {args.rounds} rounds x {args.steps} timed steps, {args.threads} thread(s)")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        phases_arm(tmp, env)
        plain_arm(tmp, args, env)
        perfdoctor_arm(tmp, args, env)
    out(machine_line())


if __name__ == "__main__":
    main()
