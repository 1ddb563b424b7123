"""Instructions per step, plain against under perfdoctor, counted by callgrind (issue 30).

    python benchmarks/step_instructions.py [--model mlp|null] [--window 60] [--offset 80]

A per-step cost in time is noisy on a shared machine (the guest's cores change speed from
second to second); the instructions a step executes are not. Both arms run `_peer_steps.py`
under `valgrind --tool=callgrind --instr-atstart=no`, side by side on their own core: the
plain script, and `perfdoctor profile --no-apply --profile-steps 0 --run-to-end` with a plan
as long as the script (its parent and child both under valgrind, only the child counted).
Counting is switched on `--offset` seconds into the loop (after perfdoctor's warm-up, its
FLOP-counted step and the settings it reads once) for `--window` seconds, then dumped. A
step is one call of `torch.nn.functional.mse_loss` (THPVariable_mse_loss: once per step in
both models), so each arm's count is divided by its own steps. Prints Ir per step of each
arm, their ratio, and the functions whose Ir per step differ most.

What it cannot see: time that is not instructions (cache and TLB misses, system calls'
cost in the kernel). Where the ratio here is ~1 and a timed ratio is not, the difference
is in what each instruction costs (benchmarks/README.md, session 6).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)
from _common import ROOT, out

PEER_SCRIPT = ROOT / "benchmarks" / "_peer_steps.py"
STEP_FUNCTION = "THPVariable_mse_loss"
ARMS = ("plain", "perfdoctor")
# Valgrind runs Python ~50x slower: torch's import alone takes minutes.
START_LEAD_S = 240.0


def profile_command(script: Path, runs: Path) -> list[str]:
    """`script` under perfdoctor as both instruction counts run it: no fix applied, no
    profiler window, a plan as long as the script (window_instructions.py uses it too)."""
    return [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", "--profile-steps",
            "0", "--run-to-end", "--warmup", "5", "--steps", "1000000", "--quiet",
            "--timeout", "3600", "-o", str(runs), str(script)]  # fmt: skip


def _command(arm: str, work: Path) -> list[str]:
    if arm == "plain":
        return [sys.executable, str(PEER_SCRIPT)]
    return profile_command(PEER_SCRIPT, work / "runs")


def _start(arm: str, core: int, model: str, work: Path, start_at: float) -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PEER_MODEL": model,
        "PEER_STEPS": "1000000",  # stopped by this script once counted
        "PEER_OUT": str(work / "result.json"),
        "PEER_START_AT": repr(start_at),
        "PYTHONPATH": str(ROOT),
    }
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={work}/cg.%p", "--trace-children=yes"]  # fmt: skip
    return subprocess.Popen(
        ["taskset", "-c", str(core), *valgrind, *_command(arm, work)],
        env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _loop_process(root_pid: int) -> int:
    """The process that runs the training loop: the largest in the tree (torch imported)."""
    import psutil

    root = psutil.Process(root_pid)
    tree = [root, *root.children(recursive=True)]
    return max(tree, key=lambda p: p.memory_info().rss).pid


def _callgrind(command: str, pid: int) -> None:
    subprocess.run(
        ["callgrind_control", command, str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
    )  # fmt: skip


def _dump_of(work: Path, pid: int | None) -> Path:
    """The dump callgrind_control asked for (`cg.PID.1`): of the loop's process, or (pid
    None) the only one in `work`."""
    found = sorted(work.glob(f"cg.{pid if pid is not None else '*'}.*"))
    if len(found) != 1 and pid is None:
        raise SystemExit(f"expected one callgrind dump in {work}, found {len(found)}")
    if not found:
        raise SystemExit(f"callgrind wrote no dump for pid {pid} in {work}")
    return found[-1]


def _calls(dump: Path) -> collections.Counter[str]:
    """Calls per callee, from the dump's `cfn=` / `calls=` lines (names are compressed:
    `(id) name` the first time, `(id)` after)."""
    names: dict[str, str] = {}
    calls: collections.Counter[str] = collections.Counter()
    callee: str | None = None
    with dump.open(errors="replace") as fh:
        for line in fh:
            m = re.match(r"^(c?fn)=\((\d+)\)(?: (.*))?", line)
            if m:
                kind, ident, name = m.groups()
                if name:
                    names[ident] = name.strip()
                if kind == "cfn":
                    callee = names.get(ident)
                continue
            if callee is not None and line.startswith("calls="):
                calls[callee] += int(line.split("=", 1)[1].split()[0])
    return calls


def _self_ir(dump: Path) -> tuple[int, dict[str, int]]:
    """Total Ir and Ir per function (self cost), from callgrind_annotate."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dump)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    total = 0
    per_function: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in m.group(2):
            total = ir
        else:
            per_function[m.group(2)] = per_function.get(m.group(2), 0) + ir
    return total, per_function


def _steps(calls: collections.Counter[str]) -> int:
    return sum(n for name, n in calls.items() if f"{STEP_FUNCTION}(" in name)


def report(dumps: dict[str, Path], model: str, top: int) -> None:
    """Ir per step of each arm's dump, their ratio, and the functions that differ most."""
    per_step: dict[str, tuple[float, dict[str, float]]] = {}
    for arm, dump in dumps.items():
        steps = _steps(_calls(dump))
        if steps == 0:
            raise SystemExit(f"{arm}: no step ({STEP_FUNCTION}) in the counted window ({dump})")
        total, functions = _self_ir(dump)
        per_step[arm] = (total / steps, {k: v / steps for k, v in functions.items()})
        out(f"{arm}: {steps} steps counted, {total / steps / 1e6:.3f} M Ir per step")
    plain, pd = per_step["plain"], per_step["perfdoctor"]
    out(
        f"{model} step: perfdoctor / plain = {pd[0] / plain[0]:.4f} in instructions "
        f"({(pd[0] - plain[0]) / 1e3:+.1f} k Ir per step)"
    )
    diff = {k: pd[1].get(k, 0.0) - plain[1].get(k, 0.0) for k in set(pd[1]) | set(plain[1])}
    out("functions whose Ir per step differ most (perfdoctor - plain):")
    for name, delta in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
        out(f"  {delta / 1e3:+9.1f} k  {name[:140]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp", choices=("mlp", "null"))
    parser.add_argument("--window", type=float, default=60.0, help="seconds counted")
    parser.add_argument("--offset", type=float, default=80.0, help="seconds into the loop")
    parser.add_argument("--top", type=int, default=15, help="functions listed")
    parser.add_argument(
        "--dumps", type=Path, help="analyse a kept work directory again (its plain/ and "
        "perfdoctor/ hold the dumps) instead of running"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.dumps is not None:
        report({arm: _dump_of(args.dumps / arm, None) for arm in ARMS}, args.model, args.top)
        return 0
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: this benchmark needs valgrind (callgrind)")
    base = Path(tempfile.mkdtemp(prefix="step-instructions-"))
    start_at = time.time() + START_LEAD_S
    arms = {}
    for core, arm in enumerate(ARMS):
        work = base / arm
        work.mkdir()
        arms[arm] = (work, _start(arm, core % (os.cpu_count() or 1), args.model, work, start_at))
    try:
        time.sleep(max(start_at + args.offset - time.time(), 0.0))
        loops = {arm: _loop_process(proc.pid) for arm, (_, proc) in arms.items()}
        for pid in loops.values():
            _callgrind("--instr=on", pid)
        time.sleep(args.window)
        for pid in loops.values():
            _callgrind("--dump", pid)
            _callgrind("--instr=off", pid)
        time.sleep(2.0)
    finally:
        for _, proc in arms.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
    dumps = {arm: _dump_of(work, loops[arm]) for arm, (work, _) in arms.items()}
    report(dumps, args.model, args.top)
    shutil.rmtree(base, ignore_errors=True)  # (kept when the analysis fails: see --dumps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
