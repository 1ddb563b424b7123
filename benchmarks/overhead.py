"""P1, instrumentation overhead: a sample model's step time under perfdoctor against plain.

    python benchmarks/overhead.py [--rounds 6] [--model tuned_mlp ...] [--diagnose]

Arms per model, run one after the other in every round and in reverse order on the next
round (A B C D, D C B A, ...), so a drift of the shared machine cancels out of the pairs:

  plain     `python script.py` through benchmarks/_plain_steps.py: one global optimizer
            post-hook appending perf_counter() (about 1 us), nothing else;
  child     perfdoctor's child alone (benchmarks/_bootstrap_without.py none): every hook
            and probe, no parent process (no sampler, no pipes, no polling);
  hooks     perfdoctor as it runs (perfdoctor.collect.launcher.launch, profile=False): the
            child, plus the parent's sampler, tee and progress threads;
  profiled  launch() with the profiler window after the timed steps (the first
            --profiler-rounds rounds only).

Models: every sample model (own logging off, --max-steps) and `null_step`, a training loop
whose step does almost nothing (a DataLoader batch of 8, Linear(8, 8), SGD), so its added
time is the instrumentation's fixed cost per step, in microseconds.

A round's figure for an arm is the median step time of its steady-state steps (the first
--warmup left out). Reported: the median over rounds of the paired ratio arm/plain with its
range, and the ratio of the best round of each arm (the machine switches between a fast
and a slow state for seconds at a time; the best rounds compare like with like). The
profiler's cost is read inside one run: median profiled step / median timed step, and the
untimed step in which the profiler opens (its WARMUP) / median timed step; the last timed
step / the median of the others shows that no timed step carries the profiler's start. The
parent's cost is its CPU time while it supervises a child (getrusage of this process, which
is the parent), and separately its sampler thread alone.

--diagnose runs the null step with each hook family left out of the child in turn, to
attribute the fixed cost. It prints, it never asserts.

--calls counts instead of timing (deterministic, so usable on a loaded machine): the null
step's child under cProfile (`_calls_child.py`) with two plans, --calls-steps timed steps
and twice that; the difference in calls over the difference in steps is what one more
steady-state step costs, per perfdoctor module and function (set-up and end cancel out).

--peers compares perfdoctor with TraceML (`traceml-ai`) on the issue-30 steps, a null step
(Linear(8, 8), batch 8) and a 3-layer MLP (hidden 384, batch 64), OMP_NUM_THREADS=1: the
script (`_peer_steps.py`) times its own steps, and runs plain (`python script.py`), under
`perfdoctor profile --no-apply --profile-steps 0 --run-to-end` (a plan as long as the
script, so every step is observed), and under `traceml run` with `trace_step(model)` around
each step, the three alternating in every round. TraceML is looked up as the `traceml`
command on PATH or in --traceml-venv (a venv with it installed; `python -m venv
--system-site-packages DIR && DIR/bin/pip install traceml-ai` with torch pinned).
`--plan-steps 20` runs perfdoctor as the issue did instead: the default plan (5 warm-up and
20 timed steps), then the script runs on with the hooks stood down, so the medians (from
step 50) are of steps after the plan: what `--run-to-end` costs the rest of a run, not
what an observed step costs.
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
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from _common import (
    QUIET_LOG_EVERY,
    ROOT,
    Spread,
    machine_line,
    out,
    sample_models,
    spread,
)

from perfdoctor.collect.launcher import launch
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import SPEC_FILE, STEPS_FILE, read_jsonl, write_json

HERE = Path(__file__).resolve().parent
PLAIN_HARNESS = HERE / "_plain_steps.py"
PEER_SCRIPT = HERE / "_peer_steps.py"
PEER_MODELS = ("null", "mlp")
PEER_ARMS = ("plain", "perfdoctor", "traceml")
CHILD_WITHOUT = HERE / "_bootstrap_without.py"
CALLS_CHILD = HERE / "_calls_child.py"
# Steps per arm: enough steady-state steps for a stable median in about 1-3 s of training.
DEFAULT_TIMED = {
    "null_step": 400,
    "tuned_mlp": 150,
    "tabular_mlp_debug": 150,
    "gpt_char_lm": 30,
    "cnn_slow_dataloader": 25,
}
PROFILED_STEPS = 5
DIAGNOSE_FAMILIES = ("roots", "backward", "dataloader", "zero_grad", "autocast,grad_scaler")

NULL_STEP_SCRIPT = textwrap.dedent(
    '''
    """A training loop whose step costs almost nothing: the instrumentation's fixed cost."""
    import argparse

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--log-every", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 8))
    steps = 0
    while steps < args.max_steps:
        for x, y in DataLoader(data, batch_size=8):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            steps += 1
            if steps >= args.max_steps:
                break
    '''
)


def script_args(total_steps: int) -> tuple[str, ...]:
    return ("--max-steps", str(total_steps), "--log-every", QUIET_LOG_EVERY, "--device", "cpu")


def spec_for(model: Path, plan: StepPlan, run_dir: Path, label: str) -> RunSpec:
    return RunSpec(
        label=label,
        # A few spare steps: perfdoctor, not the script, ends the run.
        target=Target("script", str(model), script_args(plan.total_steps + 5)),
        cwd=str(ROOT),
        run_dir=str(run_dir),
        plan=plan,
        profile=plan.profiled_steps > 0,
    )


def phase_ms(run_dir: Path, phase: str) -> list[float]:
    return [r["wall_ms"] for r in read_jsonl(run_dir / STEPS_FILE) if r["phase"] == phase]


def run_plain(model: Path, warmup: int, timed: int, work: Path) -> float:
    result = work / f"plain-{model.stem}.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(PLAIN_HARNESS),
            str(result),
            str(model),
            *script_args(warmup + timed + 1),
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
    return statistics.median(durations[warmup : warmup + timed])


def run_child_alone(
    model: Path, warmup: int, timed: int, work: Path, without: str = "none"
) -> float:
    run_dir = work / f"child-{model.stem}-{without.replace(',', '+')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.iterdir():
        old.unlink()
    spec = spec_for(model, StepPlan(warmup, timed, 0), run_dir, "child")
    write_json(run_dir / SPEC_FILE, spec)
    proc = subprocess.run(
        [sys.executable, str(CHILD_WITHOUT), without, str(run_dir / SPEC_FILE)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    timed_ms = phase_ms(run_dir, "timed")
    if proc.returncode != 0 or not timed_ms:
        raise SystemExit(f"{model.name} child ({without}) failed:\n{proc.stderr[-2000:]}")
    return statistics.median(timed_ms)


def run_launch(model: Path, plan: StepPlan, work: Path, label: str) -> dict:
    run_dir = work / f"{label}-{model.stem}"
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    manifest = launch(spec_for(model, plan, run_dir, label), echo_output=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    if manifest.status != "completed":
        raise SystemExit(f"{model.name} under perfdoctor: {manifest.status} {manifest.error}")
    return {
        "timed": phase_ms(run_dir, "timed"),
        "profiled": phase_ms(run_dir, "profiled"),
        "profiler_warmup": phase_ms(run_dir, "profiler_warmup"),
        "parent_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "wall_s": wall,
    }


def sampler_alone(seconds: float) -> float:
    """CPU seconds per wall second of the parent's sampler thread watching an idle process."""
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


class Rounds:
    """Per-arm round figures of one model, and the paired comparisons with `plain`."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.ms: dict[str, list[float]] = {}
        self.profiler_ratio: list[float] = []
        self.last_timed_ratio: list[float] = []
        self.profiler_warmup_ratio: list[float] = []
        self.parent_cpu_per_min: list[float] = []

    def add(self, arm: str, value: float) -> None:
        self.ms.setdefault(arm, []).append(value)

    def ratio(self, arm: str) -> Spread | None:
        """Paired rounds only: the plain run of the same round."""
        pairs = zip(self.ms.get(arm, []), self.ms["plain"], strict=False)
        return spread([a / p for a, p in pairs])

    def best_ratio(self, arm: str) -> float:
        return min(self.ms[arm]) / min(self.ms["plain"])

    def added_us(self, arm: str) -> Spread | None:
        pairs = zip(self.ms.get(arm, []), self.ms["plain"], strict=False)
        return spread([(a - p) * 1000.0 for a, p in pairs])


def measure_model(
    model: Path,
    arms: dict[str, Callable[[Rounds], None]],
    rounds: int,
    profiler_rounds: int,
    profiled_arm: Callable[[Rounds], None] | None,
) -> Rounds:
    result = Rounds(model.stem)
    names = list(arms)
    for r in range(rounds):
        order = names if r % 2 == 0 else list(reversed(names))
        for name in order:
            arms[name](result)
        if profiled_arm is not None and r < profiler_rounds:
            profiled_arm(result)
        line = ", ".join(f"{n} {result.ms[n][-1]:.3f} ms" for n in names)
        out(f"  round {r + 1}: {line}")
    return result


def standard_arms(
    model: Path, warmup: int, timed: int, work: Path
) -> tuple[dict[str, Callable[[Rounds], None]], Callable[[Rounds], None]]:
    def plain(res: Rounds) -> None:
        res.add("plain", run_plain(model, warmup, timed, work))

    def child(res: Rounds) -> None:
        res.add("child", run_child_alone(model, warmup, timed, work))

    def hooks(res: Rounds) -> None:
        got = run_launch(model, StepPlan(warmup, timed, 0), work, "hooks")
        res.add("hooks", statistics.median(got["timed"]))
        res.parent_cpu_per_min.append(got["parent_cpu_s"] / got["wall_s"] * 60.0)

    def profiled(res: Rounds) -> None:
        got = run_launch(model, StepPlan(warmup, timed, PROFILED_STEPS), work, "profiled")
        steady = statistics.median(got["timed"])
        res.profiler_ratio.append(statistics.median(got["profiled"]) / steady)
        res.last_timed_ratio.append(got["timed"][-1] / statistics.median(got["timed"][:-1]))
        if got["profiler_warmup"]:  # a child from before the profiler had its own step
            res.profiler_warmup_ratio.append(got["profiler_warmup"][0] / steady)

    return {"plain": plain, "child": child, "hooks": hooks}, profiled


def diagnose_arms(
    model: Path, warmup: int, timed: int, work: Path
) -> dict[str, Callable[[Rounds], None]]:
    def plain(res: Rounds) -> None:
        res.add("plain", run_plain(model, warmup, timed, work))

    def without(family: str) -> Callable[[Rounds], None]:
        def arm(res: Rounds) -> None:
            res.add(f"child-{family}", run_child_alone(model, warmup, timed, work, family))

        return arm

    arms: dict[str, Callable[[Rounds], None]] = {"plain": plain, "child-none": without("none")}
    for family in DIAGNOSE_FAMILIES:
        arms[f"child-{family}"] = without(family)
    return arms


def fmt(s: Spread | None, digits: int, unit: str = "") -> str:
    return "-" if s is None else s.fmt(digits, unit)


def print_tables(results: list[Rounds], sampler: float, sampler_s: float) -> None:
    out("")
    out(
        "| model | plain step | child / plain | under perfdoctor / plain | best / best "
        "| added per step (paired) |"
    )
    out("|---|---|---|---|---|---|")
    for res in results:
        out(
            f"| {res.model} | {statistics.median(res.ms['plain']):.3f} ms "
            f"| {fmt(res.ratio('child'), 3)} | {fmt(res.ratio('hooks'), 3)} "
            f"| {res.best_ratio('child'):.3f} / {res.best_ratio('hooks'):.3f} "
            f"| {fmt(res.added_us('hooks'), 0, ' us')} |"
        )
    out("")
    out(
        "| model | profiled / timed step | profiler start-up step / timed "
        "| last timed step / timed | parent CPU s per min |"
    )
    out("|---|---|---|---|---|")
    for res in results:
        out(
            f"| {res.model} | {fmt(spread(res.profiler_ratio), 2)} "
            f"| {fmt(spread(res.profiler_warmup_ratio), 2)} "
            f"| {fmt(spread(res.last_timed_ratio), 2)} "
            f"| {fmt(spread(res.parent_cpu_per_min), 2)} |"
        )
    out("")
    out(
        f"sampler thread alone (NVML + psutil, {sampler_s:g} s, idle child): "
        f"{sampler * 60:.2f} CPU s per minute ({sampler * 100:.2f}% of one core)"
    )
    models = [r for r in results if r.model != "null_step"]
    if models:
        worst = max(models, key=lambda r: r.ratio("hooks").median)
        out(
            f"target: under perfdoctor / plain <= 1.02 (median of paired rounds); worst "
            f"sample model {worst.model} x{worst.ratio('hooks').median:.3f}"
        )
    null = next((r for r in results if r.model == "null_step"), None)
    if null is not None:
        fixed_us = null.added_us("hooks").median
        implied = ", ".join(
            f"{r.model} {fixed_us / (statistics.median(r.ms['plain']) * 1000) * 100:.1f}%"
            for r in models
        )
        out(f"fixed cost (null step) {fixed_us:.0f} us per step; as a share of plain: {implied}")


def print_diagnosis(res: Rounds) -> None:
    out("")
    out("| null step, child without | step | added over plain (paired) | saved vs full child |")
    out("|---|---|---|---|")
    full = res.ms["child-none"]
    for arm, values in res.ms.items():
        if arm == "plain":
            continue
        saved = spread([(f - v) * 1000.0 for f, v in zip(full, values, strict=False)])
        out(
            f"| {arm.removeprefix('child-')} | {statistics.median(values) * 1000:.0f} us "
            f"| {fmt(res.added_us(arm), 0, ' us')} | {fmt(saved, 0, ' us')} |"
        )


def child_calls(model: Path, warmup: int, timed: int, work: Path) -> dict[str, list[float]]:
    """Calls and own seconds per perfdoctor function in one child under cProfile."""
    run_dir = work / f"calls-{model.stem}-{timed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = spec_for(model, StepPlan(warmup, timed, 0), run_dir, "calls")
    write_json(run_dir / SPEC_FILE, spec)
    result = work / f"calls-{timed}.json"
    proc = subprocess.run(
        [sys.executable, str(CALLS_CHILD), str(result), str(run_dir / SPEC_FILE)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"{model.name} child under cProfile failed:\n{proc.stderr[-2000:]}")
    return json.loads(result.read_text())


def calls_per_step(model: Path, warmup: int, steps: int, work: Path) -> None:
    """One more step's perfdoctor calls: two plans, steps and 2 x steps, differenced.

    Calls only: cProfile's own times on a loaded machine move by more than the effect."""
    short = child_calls(model, warmup, steps, work)
    long = child_calls(model, warmup, 2 * steps, work)
    per: dict[str, float] = {}
    for key in set(short) | set(long):
        calls = (long.get(key, [0])[0] - short.get(key, [0])[0]) / steps
        if abs(calls) >= 0.005:
            per[key] = calls
    own = {k: v for k, v in per.items() if "is_compiling" not in k.rsplit(":", 1)[1]}
    by_file: dict[str, float] = {}
    for key, calls in own.items():
        name = key.rsplit(":", 1)[0]
        by_file[name] = by_file.get(name, 0.0) + calls
    compiling = sum(v for k, v in per.items() if k not in own)
    out(f"{model.stem}: perfdoctor function calls per step (steps {steps} -> {2 * steps}, "
        f"differenced): {sum(own.values()):.1f}, and torch.compiler.is_compiling "
        f"{compiling:.1f}")  # fmt: skip
    out("")
    out("| module | calls per step |")
    out("|---|---|")
    for name, calls in sorted(by_file.items(), key=lambda kv: -kv[1]):
        out(f"| {name} | {calls:.2f} |")
    out("")
    out("| function | calls per step |")
    out("|---|---|")
    for key, calls in sorted(per.items(), key=lambda kv: -kv[1]):
        out(f"| {key.rsplit('site-packages/', 1)[-1]} | {calls:.2f} |")


# TraceML 0.5 waits a fixed 15 s for its aggregator process to listen, and at load 20 the
# aggregator's start (importing torch) takes longer: the script then never starts, three
# tries in a row. The `traceml` command is run through its own interpreter with that wait
# raised; nothing else of TraceML changes, and none of it is inside a timed step.
TRACEML_LAUNCH = (
    "import sys; import traceml_ai.launcher.commands as c; "
    "c.DEFAULT_TCP_READY_TIMEOUT_SEC = 300.0; "
    "from traceml_ai.launcher.cli import main; sys.argv[0] = 'traceml'; sys.exit(main())"
)


def _traceml_command(venv: Path | None) -> list[str] | None:
    """How to run `traceml`: its script's interpreter with TRACEML_LAUNCH, or the command."""
    import shutil

    found = venv / "bin" / "traceml" if venv is not None else None
    path = str(found) if found is not None and found.exists() else shutil.which("traceml")
    if path is None:
        return None
    first = Path(path).read_bytes()[:300].split(b"\n", 1)[0].decode(errors="replace")
    if first.startswith("#!") and "python" in first:
        return [first[2:].strip(), "-c", TRACEML_LAUNCH]
    return [path]


def peer_command(
    arm: str,
    model: str,
    steps: int,
    work: Path,
    traceml: list[str] | None,
    start_at: float = 0.0,
    *,
    tree: Path = ROOT,
    plan_steps: int | None = None,
    skip: int | None = None,
    tag: str | None = None,
) -> tuple[list[str], dict[str, str], Path]:
    """How one arm runs `_peer_steps.py`: its command, its environment, its result file.
    `tree`: the checkout perfdoctor is imported from; `plan_steps`: perfdoctor's plan
    (default: every step of the script); `skip`: steps left out of the medians (the
    script's default 50); `tag`: names the arm's files where two arms share `arm`."""
    name = tag or arm
    result = work / f"peer-{name}-{model}.json"
    result.unlink(missing_ok=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PEER_MODEL": model,
        "PEER_STEPS": str(steps),
        "PEER_OUT": str(result),
        "PEER_START_AT": repr(start_at),
        "PYTHONPATH": str(tree),
    }
    if skip is not None:
        env["PEER_WARMUP"] = str(skip)
    script = str(PEER_SCRIPT)
    if arm == "plain":
        command = [sys.executable, script]
    elif arm == "perfdoctor":
        # By default the plan covers every step of the script, so none runs unobserved.
        command = [sys.executable, "-m", "perfdoctor", "profile", "--no-apply",
                   "--profile-steps", "0", "--run-to-end", "--warmup", "5",
                   "--steps", str(plan_steps or steps + 10), "--quiet",
                   "-o", str(work / f"pd-runs-{name}-{model}"), script]  # fmt: skip
    else:
        assert traceml is not None
        env["PEER_TRACEML"] = "1"
        command = [*traceml, "run", "--logs-dir", str(work / f"traceml-logs-{model}"), script]
    return command, env, result


def peer_result(arm: str, model: str, proc: subprocess.CompletedProcess[str], result: Path) -> dict:
    if proc.returncode != 0 or not result.exists():
        raise SystemExit(f"{arm} on the {model} step failed:\n{proc.stderr[-2000:]}")
    return json.loads(result.read_text())


def run_peer(
    arm: str, model: str, steps: int, work: Path, traceml: list[str] | None
) -> tuple[float, float]:
    """The script's own median step under one tool: (wall ms, CPU ms of the process)."""
    command, env, result = peer_command(arm, model, steps, work, traceml)
    for _ in range(3):
        proc = subprocess.run(
            command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, check=False,
        )  # fmt: skip
        # TraceML waits 15 s (fixed) for its aggregator to listen: too short on a loaded
        # machine, and the script then never starts. A start-up failure, so try again.
        if "did not become ready" not in proc.stderr:
            break
    got = peer_result(arm, model, proc, result)
    return float(got["median_ms"]), float(got["cpu_median_ms"])


def run_side_by_side(
    arms: tuple[str, str],
    model: str,
    steps: int,
    work: Path,
    traceml: list[str] | None,
    lead_s: float,
    same_core: bool = False,
    helpers_core: int | None = None,
    plan_steps: int | None = None,
) -> tuple[dict, dict]:
    """Two arms started together, each holding its loop until the same moment (lead_s after
    the start, time for both to import torch and install their hooks), then timing its
    steps on its own core beside the other: the machine's drift from one minute to the next
    falls on both alike (start_together). `plan_steps`: perfdoctor's plan (peer_command)."""
    start_at = time.time() + lead_s
    specs = [
        (arm, *peer_command(arm, model, steps, work, traceml, start_at, plan_steps=plan_steps))
        for arm in arms
    ]
    return start_together(specs, model, work, start_at, same_core, helpers_core)


def start_together(
    specs: list[tuple[str, list[str], dict[str, str], Path]],
    model: str,
    work: Path,
    start_at: float,
    same_core: bool,
    helpers_core: int | None = None,
) -> tuple[dict, dict]:
    """Two arms (name, command, environment, result file from peer_command, all with the
    same PEER_START_AT) started at once. The first runs on core 0, the second on core 1
    (taskset), or both on core 0 with `same_core`: time-sliced on one core, each process's
    CPU time per step sees the same core at the same moments. Each result says when its
    loop ran (`loop_start`, `loop_end`) and how late it started (`late_s`).

    `helpers_core` (with `same_core`): every process starts on that core and the training
    script moves all its threads to core 0 as its loop starts (PEER_PIN_CORE): the two
    training processes share core 0, the tools' helper processes (perfdoctor's parent,
    TraceML's aggregator) run on the other core, as on a machine with a core to spare."""
    started = []
    for core, (arm, command, env, result) in enumerate(specs):
        # The tool's helper processes (perfdoctor's parent, TraceML's aggregator) inherit the
        # core. On two cores the guest's cores need not run at one speed, so the rounds swap
        # the arms' cores and the ratios' median cancels the difference.
        if same_core and helpers_core is not None:
            command = ["taskset", "-c", str(helpers_core), *command]
            env = {**env, "PEER_PIN_CORE": "0"}
        else:
            command = ["taskset", "-c", str(0 if same_core else core), *command]
        proc = subprocess.Popen(
            command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        started.append((arm, proc, command, result))
    results = []
    for arm, proc, command, result in started:
        _, err = proc.communicate()
        done = subprocess.CompletedProcess(command, proc.returncode, "", err)
        got = peer_result(arm, model, done, result)
        got["late_s"] = got["loop_start"] - start_at
        results.append(got)
    return results[0], results[1]


def peers(rounds: int, steps: int, work: Path, traceml: list[str]) -> None:
    out(f"peers: {rounds} rounds, {steps} steps per run (50 warm-up left out), arms alternate")
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for model in PEER_MODELS:
            order = PEER_ARMS if r % 2 == 0 else PEER_ARMS[::-1]
            for arm in order:
                w, c = run_peer(arm, model, steps, work, traceml)
                wall.setdefault((model, arm), []).append(w)
                cpu.setdefault((model, arm), []).append(c)
            line = ", ".join(
                f"{a} {wall[(model, a)][-1]:.3f} ms ({cpu[(model, a)][-1]:.3f} CPU)"
                for a in PEER_ARMS
            )
            out(f"  round {r + 1} {model}: {line} | load {os.getloadavg()[0]:.1f}")
    for title, ms in (("wall time per step", wall), ("CPU time per step (process)", cpu)):
        pairs = {
            (model, tool): list(zip(ms[(model, "plain")], ms[(model, tool)], strict=True))
            for model in PEER_MODELS
            for tool in PEER_ARMS[1:]
        }
        peer_table(f"{title}, median of paired rounds [range]:", pairs)


def peer_table(title: str, pairs: dict[tuple[str, str], list[tuple[float, float]]]) -> None:
    """Each tool against plain per model: (plain ms, tool ms) pairs -> the median plain step,
    and the spread of the within-pair ratios and added microseconds."""
    out("")
    out(title)
    out("")
    out("| step | plain | perfdoctor / plain | added | TraceML / plain | added |")
    out("|---|---|---|---|---|---|")
    for model in PEER_MODELS:
        plain = [p for tool in PEER_ARMS[1:] for p, _ in pairs.get((model, tool), [])]
        cells = [f"{statistics.median(plain):.3f} ms" if plain else "-"]
        for tool in PEER_ARMS[1:]:
            got = pairs.get((model, tool), [])
            cells += [
                fmt(spread([t / p for p, t in got]), 3),
                fmt(spread([(t - p) * 1000.0 for p, t in got]), 0, " us"),
            ]
        out(f"| {model} | " + " | ".join(cells) + " |")


def peers_side_by_side(
    rounds: int,
    steps: int,
    work: Path,
    traceml: list[str],
    lead_s: float,
    same_core: bool,
    helpers_core: int | None = None,
    plan_steps: int | None = None,
) -> None:
    """Each tool beside plain, the two started together (run_side_by_side): perfdoctor and
    plain, then TraceML and plain, each model, every round; the ratio is taken within a pair.
    Pairs whose loops did not start within LATE_S of each other are shown and left out.
    `same_core`: both on one core, compared by the process's CPU time per step (the other
    process's slices are not in it); a tool's helper processes (perfdoctor's parent,
    TraceML's aggregator) then share that core, and their own CPU is not in the figure;
    with `helpers_core` they run on that core instead (start_together)."""
    key = "cpu_median_ms" if same_core else "median_ms"
    where = "on the other core"
    if same_core:
        where = "on the same core (CPU time per step)"
        if helpers_core is not None:
            where += f", the tools' helper processes on core {helpers_core}"
    plan = "perfdoctor's plan covers every step"
    if plan_steps:
        plan = f"perfdoctor's plan: {plan_steps} timed steps, then the script runs on"
    out(
        f"peers side by side: {rounds} rounds, {steps} steps per run (50 warm-up left out), "
        f"each tool's run beside a plain run {where}, loops held {lead_s:.0f} s; {plan}"
    )
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(rounds):
        for model in PEER_MODELS:
            for tool in PEER_ARMS[1:]:
                # The arms swap cores every round (run_side_by_side: first on core 0).
                arms = ("plain", tool) if r % 2 == 0 else (tool, "plain")
                first, second = run_side_by_side(
                    arms, model, steps, work, traceml, lead_s, same_core, helpers_core, plan_steps
                )
                got = dict(zip(arms, (first, second), strict=True))
                p, t = got["plain"], got[tool]
                late = max(abs(p["late_s"]), abs(t["late_s"]))
                overlap = min(p["loop_end"], t["loop_end"]) - max(p["loop_start"], t["loop_start"])
                shorter = min(p["loop_end"] - p["loop_start"], t["loop_end"] - t["loop_start"])
                kept = late <= LATE_S and overlap >= 0.9 * shorter
                out(f"  round {r + 1} {model}: plain {p[key]:.3f} ms beside {tool} "
                    f"{t[key]:.3f} ms ({t[key] / p[key]:.3f}x); loops "
                    f"overlap {overlap / shorter:.0%}, late {late:.2f} s"
                    f"{'' if kept else ' (left out)'} | load {os.getloadavg()[0]:.1f}")  # fmt: skip
                if kept:
                    pairs.setdefault((model, tool), []).append((p[key], t[key]))
    what = "CPU time" if same_core else "wall time"
    peer_table(f"{what} per step beside plain, median of the kept pairs [range]:", pairs)


# A pair whose two loops started further apart than this did not run side by side.
LATE_S = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="paired rounds per model")
    parser.add_argument(
        "--profiler-rounds", type=int, default=2, help="rounds that also run the profiled arm"
    )
    parser.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    parser.add_argument("--timed", type=int, default=0, help="measured steps (0: per model)")
    parser.add_argument("--model", action="append", help="model stem (default: all)")
    parser.add_argument("--sampler-seconds", type=float, default=10.0)
    parser.add_argument(
        "--diagnose", action="store_true", help="only the null step, hook families left out"
    )
    parser.add_argument(
        "--peers", action="store_true", help="perfdoctor against TraceML on two step sizes"
    )
    parser.add_argument("--peer-steps", type=int, default=600, help="steps per --peers run")
    parser.add_argument(
        "--plan-steps",
        type=int,
        default=0,
        help="--side-by-side: perfdoctor's timed steps, then the script runs on (0: every step "
        "observed; 20: the default plan of the issue's `profile --no-apply --profile-steps 0 "
        "--run-to-end`)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="--peers: each tool's run beside a plain run, both started together",
    )
    parser.add_argument(
        "--same-core",
        action="store_true",
        help="--side-by-side: both on one core, by the process's CPU time per step",
    )
    parser.add_argument(
        "--helpers-elsewhere",
        action="store_true",
        help="--same-core: the training processes on core 0, the tools' helpers on core 1",
    )
    parser.add_argument(
        "--lead", type=float, default=20.0, help="--side-by-side: seconds before the loops start"
    )
    parser.add_argument("--traceml-venv", type=Path, help="a venv with traceml-ai installed")
    parser.add_argument(
        "--calls", action="store_true", help="count perfdoctor's calls per null step (cProfile)"
    )
    parser.add_argument("--calls-steps", type=int, default=1000, help="steps of the short plan")
    args = parser.parse_args(argv)

    out(machine_line())
    if args.peers:
        traceml = _traceml_command(args.traceml_venv)
        if traceml is None:
            out("no `traceml` command: install traceml-ai (see --help), or pass --traceml-venv")
            return 0
        with tempfile.TemporaryDirectory(prefix="pd-peers-") as tmp:
            if args.side_by_side:
                if args.helpers_elsewhere and not args.same_core:
                    parser.error("--helpers-elsewhere needs --same-core")
                peers_side_by_side(
                    args.rounds,
                    args.peer_steps,
                    Path(tmp),
                    traceml,
                    args.lead,
                    args.same_core,
                    1 if args.helpers_elsewhere else None,
                    args.plan_steps or None,
                )
            else:
                if args.plan_steps:
                    parser.error("--plan-steps needs --side-by-side")
                peers(args.rounds, args.peer_steps, Path(tmp), traceml)
        out(machine_line())
        return 0
    with tempfile.TemporaryDirectory(prefix="pd-overhead-") as tmp:
        work = Path(tmp)
        null_step = work / "null_step.py"
        null_step.write_text(NULL_STEP_SCRIPT)
        if args.calls:
            calls_per_step(null_step, args.warmup, args.calls_steps, work)
            return 0
        if args.diagnose:
            timed = args.timed or DEFAULT_TIMED["null_step"]
            out(f"P1 diagnosis: null step, {args.rounds} rounds of {timed} steps per arm")
            arms = diagnose_arms(null_step, args.warmup, timed, work)
            print_diagnosis(measure_model(null_step, arms, args.rounds, 0, None))
            return 0
        models = [null_step, *sample_models()]
        models = [m for m in models if not args.model or m.stem in args.model]
        out(
            f"P1 overhead: {args.rounds} paired rounds (the first {args.profiler_rounds} also "
            "with the profiled arm); arms alternate A B C / C B A"
        )
        results = []
        for model in models:
            timed = args.timed or DEFAULT_TIMED.get(model.stem, 50)
            out(f"{model.stem}: {args.warmup} warm-up + {timed} measured steps per arm")
            arms, profiled = standard_arms(model, args.warmup, timed, work)
            results.append(measure_model(model, arms, args.rounds, args.profiler_rounds, profiled))
    sampler = sampler_alone(args.sampler_seconds)
    print_tables(results, sampler, args.sampler_seconds)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    raise SystemExit(main())
