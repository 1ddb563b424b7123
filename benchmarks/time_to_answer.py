"""P3, time to answer: wall time of `perfdoctor profile` against the plain script.

    python benchmarks/time_to_answer.py [--rounds 1] [--model cnn_slow_dataloader ...]

Three arms per sample model, alternating (A B C, then C B A on the next round):

  plain     `python script.py --max-steps N` with N = the default plan's steps (5 + 20 + 3),
            the script's own logging off: what the user would wait for anyway;
  no-apply  `perfdoctor profile --no-apply` (one child run, diagnosis, reports);
  apply     `perfdoctor profile` (default plan: baseline, then each runtime candidate and
            the baseline alternating, --repeat 2 rounds, then the stacked variant).

Each is a fresh process timed from the outside. Where the time goes is read back from the
session directory: per child run, the start-up until its first step (Python, torch import,
the script's own set-up), the steps by phase, the tail after the last step (profiler trace
written, observations, exit); what is left of the wall time is the parent: its imports,
diagnosis between runs, the reports.

It prints, it never asserts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from _common import (
    QUIET_LOG_EVERY,
    ROOT,
    machine_line,
    out,
    run_child,
    sample_models,
    spread,
)

from perfdoctor.model import StepPlan
from perfdoctor.rundir import read_json, read_jsonl

TARGET_S = 90.0


def plain(model: Path, steps: int) -> float:
    res = run_child(
        [sys.executable, str(model), "--max-steps", str(steps), "--log-every", QUIET_LOG_EVERY],
        cwd=ROOT,
    )
    if res.returncode != 0:
        raise SystemExit(f"{model.name} failed:\n{res.stderr[-2000:]}")
    return res.wall_s


def profile(model: Path, apply: bool, work: Path) -> tuple[float, Path]:
    runs = work / f"{model.stem}-{'apply' if apply else 'no-apply'}"
    shutil.rmtree(runs, ignore_errors=True)
    command = [sys.executable, "-m", "perfdoctor", "profile", "--quiet", "--out", str(runs)]
    command += [] if apply else ["--no-apply"]
    command += [str(model), "--log-every", QUIET_LOG_EVERY]
    res = run_child(command, cwd=ROOT)
    if res.returncode != 0:
        raise SystemExit(f"perfdoctor on {model.name} failed:\n{res.stderr[-2000:]}")
    return res.wall_s, (runs / "latest").resolve()


def where_time_goes(session: Path, total_s: float) -> dict[str, float]:
    """Seconds by activity over every child run of a session, and the parent's remainder."""
    parts: dict[str, float] = defaultdict(float)
    children = sorted(session.rglob("manifest.json"))
    for manifest_path in children:
        run = manifest_path.parent
        wall = float(read_json(manifest_path)["wall_s"])
        rows = list(read_jsonl(run / "progress.jsonl"))
        parts["child runs"] += wall
        if not rows:
            parts["child start-up"] += wall
            continue
        first, last = rows[0], rows[-1]
        parts["child start-up"] += max(first["t"] - first["wall_ms"] / 1000.0, 0.0)
        for row in rows:
            parts[f"steps: {row['phase']}"] += row["wall_ms"] / 1000.0
        parts["child tail (trace, exit)"] += max(wall - last["t"], 0.0)
    parts["runs"] = len(children)
    parts["parent (imports, diagnosis, reports)"] = total_s - parts["child runs"]
    return dict(parts)


def describe(parts: dict[str, float]) -> str:
    keys = [
        "child start-up",
        "steps: warmup",
        "steps: timed",
        "steps: profiled",
        "child tail (trace, exit)",
        "parent (imports, diagnosis, reports)",
    ]
    return ", ".join(f"{k} {parts.get(k, 0.0):.1f} s" for k in keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="paired rounds per model")
    parser.add_argument("--model", action="append", help="sample model stem (default: all)")
    args = parser.parse_args(argv)

    steps = StepPlan().total_steps
    models = [m for m in sample_models() if not args.model or m.stem in args.model]
    out(machine_line())
    out(f"P3 time to answer: {args.rounds} round(s); plain = the script for {steps} steps")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pd-tta-") as tmp:
        work = Path(tmp)
        for model in models:
            times: dict[str, list[float]] = defaultdict(list)
            sessions: dict[str, tuple[float, Path]] = {}
            arms = ["plain", "no-apply", "apply"]
            for r in range(args.rounds):
                for arm in arms if r % 2 == 0 else list(reversed(arms)):
                    if arm == "plain":
                        times[arm].append(plain(model, steps))
                    else:
                        wall, session = profile(model, arm == "apply", work)
                        times[arm].append(wall)
                        sessions[arm] = (wall, session)
                    out(f"  {model.stem} round {r + 1} {arm}: {times[arm][-1]:.1f} s")
            wall, session = sessions["apply"]
            parts = where_time_goes(session, wall)
            no_apply_wall, no_apply_session = sessions["no-apply"]
            no_apply_parts = where_time_goes(no_apply_session, no_apply_wall)
            session_info = read_json(session / "session.json")
            tried = [v["label"] for v in session_info.get("variants", [])]
            rows.append((model.stem, times, parts, no_apply_parts, tried))
            out(f"  apply: {int(parts['runs'])} child runs, tried {tried or 'nothing'}")
            out(f"    {describe(parts)}")
            out(f"  no-apply: {describe(no_apply_parts)}")

    out("")
    out(f"| model | plain, {steps} steps | --no-apply | x plain | apply | x plain | runs |")
    out("|---|---|---|---|---|---|---|")
    for name, times, parts, _, tried in rows:
        p = statistics.median(times["plain"])
        n = spread(times["no-apply"])
        a = spread(times["apply"])
        out(
            f"| {name} | {p:.1f} s | {n.fmt(1, ' s')} | {n.median / p:.1f} | {a.fmt(1, ' s')} "
            f"| {a.median / p:.1f} | {int(parts['runs'])} ({', '.join(tried) or 'no candidate'}) |"
        )
    worst = max(statistics.median(t["apply"]) for _, t, _, _, _ in rows)
    out(f"target: apply <= {TARGET_S:.0f} s on this machine; slowest model {worst:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
