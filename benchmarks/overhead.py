"""P1, instrumentation overhead: a sample model's step time under perfdoctor against plain.

    python benchmarks/overhead.py [--rounds 5] [--model tuned_mlp ...] [--timed 60]

Three arms per sample model, alternating in every round (A B C, then C B A, ...) so a
drift of the shared machine cancels out of the paired ratios:

  plain     `python script.py` through benchmarks/_plain_steps.py: one global optimizer
            post-hook appending perf_counter() (about 1 us), nothing else;
  hooks     perfdoctor's child (perfdoctor.collect.launcher.launch, profile=False): every
            hook and probe, the parent's sampler thread and tee threads, no profiler;
  profiled  the same with the profiler window (the default plan's last phase).

Each arm runs the same number of steps (--max-steps, the script's own logging off). A
round's figure is the median step time of the steady-state steps (after --warmup); the
overhead is the median over rounds of the paired ratio hooks/plain, with its range.
The profiler's cost is read inside one run: median profiled step / median timed step
(the last timed step is left out of both: the profiler opens in it, in WARMUP).
The parent's cost is its CPU time while it supervises the child (getrusage of this
process, which is the parent here), and separately the sampler thread alone.

It prints, it never asserts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    QUIET_LOG_EVERY,
    ROOT,
    machine_line,
    median_or_none,
    out,
    sample_models,
    spread,
)

from perfdoctor.collect.launcher import launch
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import read_jsonl

PLAIN_HARNESS = Path(__file__).resolve().parent / "_plain_steps.py"
# Steps per arm: enough steady-state steps for a stable median, about 1-3 s of training.
DEFAULT_TIMED = {
    "tuned_mlp": 150,
    "tabular_mlp_debug": 150,
    "gpt_char_lm": 40,
    "cnn_slow_dataloader": 30,
}
PROFILED_STEPS = 5


def script_args(model: Path, total_steps: int) -> tuple[str, ...]:
    return ("--max-steps", str(total_steps), "--log-every", QUIET_LOG_EVERY, "--device", "cpu")


def run_plain(model: Path, warmup: int, timed: int, work: Path) -> list[float]:
    result = work / f"plain-{model.stem}.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(PLAIN_HARNESS),
            str(result),
            str(model),
            *script_args(model, warmup + timed + 1),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{model.name} plain run failed:\n{proc.stderr[-2000:]}")
    ends = json.loads(result.read_text())["step_ends_s"]
    # Step k (0-based) lasts from the end of step k-1 to the end of step k.
    durations = [(b - a) * 1000.0 for a, b in itertools.pairwise(ends)]
    return durations[warmup : warmup + timed]


def run_perfdoctor(
    model: Path, warmup: int, timed: int, profiled: int, work: Path, label: str
) -> dict:
    run_dir = work / f"{label}-{model.stem}"
    spec = RunSpec(
        label=label,
        target=Target("script", str(model), script_args(model, warmup + timed + profiled + 5)),
        cwd=str(ROOT),
        run_dir=str(run_dir),
        plan=StepPlan(warmup_steps=warmup, timed_steps=timed, profiled_steps=profiled),
        profile=profiled > 0,
    )
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    manifest = launch(spec, echo_output=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    if manifest.status != "completed":
        raise SystemExit(f"{model.name} under perfdoctor: {manifest.status} {manifest.error}")
    rows = list(read_jsonl(run_dir / "steps.jsonl"))
    timed_ms = [r["wall_ms"] for r in rows if r["phase"] == "timed"]
    return {
        "timed": timed_ms,
        "profiled": [r["wall_ms"] for r in rows if r["phase"] == "profiled"],
        "parent_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "wall_s": wall,
    }


def sampler_alone(seconds: float) -> float:
    """CPU seconds per wall second of the sampler thread watching an idle process."""
    from perfdoctor.collect.cpu_sampler import CpuSampler
    from perfdoctor.collect.nvml import NvmlSampler
    from perfdoctor.collect.sampling import DEFAULT_PERIOD_S, SamplingThread

    idle = subprocess.Popen(["sleep", str(seconds + 2)])
    with tempfile.TemporaryDirectory() as tmp:
        thread = SamplingThread(
            [NvmlSampler(), CpuSampler(idle.pid)],
            Path(tmp) / "samples.jsonl",
            origin=time.monotonic(),
            period_s=DEFAULT_PERIOD_S,
        )
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        thread.start()
        time.sleep(seconds)
        thread.stop()
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
    idle.kill()
    idle.wait()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / wall


def measure_model(
    model: Path, rounds: int, profiler_rounds: int, warmup: int, timed: int, work: Path
) -> dict:
    ratios: list[float] = []
    diffs_us: list[float] = []
    plain_ms: list[float] = []
    hooks_ms: list[float] = []
    profiler_ratios: list[float] = []
    last_timed_ratios: list[float] = []
    parent_cpu_per_min: list[float] = []
    for r in range(rounds):
        arms = ["plain", "hooks"] + (["profiled"] if r < profiler_rounds else [])
        order = arms if r % 2 == 0 else list(reversed(arms))
        got: dict[str, float] = {}
        for arm in order:
            if arm == "plain":
                got[arm] = statistics.median(run_plain(model, warmup, timed, work))
            elif arm == "hooks":
                res = run_perfdoctor(model, warmup, timed, 0, work, "hooks")
                got[arm] = statistics.median(res["timed"])
                parent_cpu_per_min.append(res["parent_cpu_s"] / res["wall_s"] * 60.0)
            else:
                res = run_perfdoctor(model, warmup, timed, PROFILED_STEPS, work, "profiled")
                timed_ms, prof_ms = res["timed"], res["profiled"]
                steady = statistics.median(timed_ms[:-1])
                profiler_ratios.append(statistics.median(prof_ms) / steady)
                last_timed_ratios.append(timed_ms[-1] / steady)
        plain_ms.append(got["plain"])
        hooks_ms.append(got["hooks"])
        ratios.append(got["hooks"] / got["plain"])
        diffs_us.append((got["hooks"] - got["plain"]) * 1000.0)
        window = f", profiled window x{profiler_ratios[-1]:.2f}" if "profiled" in arms else ""
        out(
            f"  round {r + 1}: plain {got['plain']:.3f} ms, hooks {got['hooks']:.3f} ms "
            f"(x{ratios[-1]:.3f}){window}"
        )
    return {
        "model": model.stem,
        "plain_ms": median_or_none(plain_ms),
        "hooks_ms": median_or_none(hooks_ms),
        "ratio": spread(ratios),
        "diff_us": spread(diffs_us),
        "profiler_ratio": spread(profiler_ratios),
        "last_timed_ratio": spread(last_timed_ratios),
        "parent_cpu_s_per_min": spread(parent_cpu_per_min),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds per model")
    parser.add_argument(
        "--profiler-rounds", type=int, default=3, help="rounds that also run the profiled arm"
    )
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    parser.add_argument("--timed", type=int, default=0, help="measured steps (0: per model)")
    parser.add_argument("--model", action="append", help="sample model stem (default: all)")
    parser.add_argument("--sampler-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)

    models = [m for m in sample_models() if not args.model or m.stem in args.model]
    out(machine_line())
    out(
        f"P1 overhead: {args.rounds} paired rounds (the first {args.profiler_rounds} with the "
        "profiled arm); arms alternate A B C / C B A"
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="pd-overhead-") as tmp:
        for model in models:
            timed = args.timed or DEFAULT_TIMED.get(model.stem, 50)
            out(f"{model.stem}: {args.warmup} warm-up + {timed} measured steps per arm")
            results.append(
                measure_model(
                    model, args.rounds, args.profiler_rounds, args.warmup, timed, Path(tmp)
                )
            )
    sampler = sampler_alone(args.sampler_seconds)

    out("")
    out("| model | plain step | under hooks | hooks / plain (median [range]) | added per step |")
    out("|---|---|---|---|---|")
    for res in results:
        out(
            f"| {res['model']} | {res['plain_ms']:.3f} ms | {res['hooks_ms']:.3f} ms | "
            f"{res['ratio'].fmt(3)} | {res['diff_us'].fmt(0, ' us')} |"
        )
    out("")
    out("| model | profiled / timed step | last timed step / timed median | parent CPU s per min |")
    out("|---|---|---|---|")
    for res in results:
        out(
            f"| {res['model']} | {res['profiler_ratio'].fmt(2)} | "
            f"{res['last_timed_ratio'].fmt(2)} | {res['parent_cpu_s_per_min'].fmt(2)} |"
        )
    out("")
    out(
        f"sampler thread alone (NVML + psutil, {args.sampler_seconds:g} s, idle child): "
        f"{sampler * 60:.2f} CPU s per minute ({sampler * 100:.2f}% of one core)"
    )
    worst = max((r["ratio"].median for r in results), default=float("nan"))
    out(f"target: hooks / plain <= 1.02 (median of paired runs); worst model x{worst:.3f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    raise SystemExit(main())
