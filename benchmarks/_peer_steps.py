"""The training script of `overhead.py --peers`: it times its own steps.

    python _peer_steps.py                      # plain
    perfdoctor profile --no-apply --profile-steps 0 --run-to-end _peer_steps.py
    traceml run _peer_steps.py                 # with PEER_TRACEML=1: trace_step(model)

Everything comes from the environment (PEER_MODEL null|mlp, PEER_STEPS, PEER_WARMUP,
PEER_OUT, PEER_TRACEML, PEER_START_AT, PEER_PIN_CORE, PEER_PYTHON_WORK), so no tool's
option parsing touches the script's arguments. PEER_START_AT (a time.time() value) holds
the loop until then: arms started together then time their steps side by side, under the
same load of a shared machine.
A step is one loop iteration, zero_grad through optimizer.step (inside TraceML's
`trace_step` block where it is on): the time between the starts of consecutive iterations,
so whatever a tool does at a step's edges is inside it. The medians of the steps after the
warm-up, wall and the process's CPU time (all threads), go to PEER_OUT as JSON.
PEER_PIN_CORE (a core number) moves every thread of this process onto that core as the
loop starts, the tool's threads in this process with it; the tool's helper processes stay
on the core they were started on. PEER_PYTHON_WORK (iterations) adds plain Python work to
every step, a quarter before each of its four calls, the way a tool's hooks run between the
ops (PEER_PYTHON_WORK_KIND: what the work touches, see WORK_KIND); its own CPU time, timed
alone after the loop, goes to PEER_OUT as `python_work_us`, and its time inside the loop
(the median step's sum of its four parts) as `python_work_in_loop_us`
(benchmarks/python_work_cost.py). PEER_PHASES=1 times each of the step's calls (zero_grad,
forward, loss, backward, optimizer step) and writes their medians as `phase_us`
(benchmarks/phase_costs.py).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import statistics
import time

import torch

MODEL = os.environ.get("PEER_MODEL", "null")
STEPS = int(os.environ.get("PEER_STEPS", "600"))
WARMUP = int(os.environ.get("PEER_WARMUP", "50"))
OUT = os.environ.get("PEER_OUT")
TRACEML = os.environ.get("PEER_TRACEML") == "1"
START_AT = float(os.environ.get("PEER_START_AT", "0"))
PIN_CORE = os.environ.get("PEER_PIN_CORE")
PYTHON_WORK = int(os.environ.get("PEER_PYTHON_WORK", "0"))
PHASES = os.environ.get("PEER_PHASES") == "1"
PHASE_NAMES = ("zero_grad", "forward", "loss", "backward", "step")
# PEER_PYTHON_WORK_KIND: objects (default), arithmetic (the same loop touching no memory but
# its locals) or spread (each iteration reads another of many objects: a footprint in the
# caches like that of many functions' code and dicts, at the same count of iterations).
WORK_KIND = os.environ.get("PEER_PYTHON_WORK_KIND", "objects")
SPREAD_OBJECTS = 1 << 15  # 32,768 objects of 48 bytes: 1.5 MB, more than a core's L2


class _Cell:
    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


class _Scratch:
    """What the work reads and writes: attributes, a dict, a list, as a hook's bookkeeping."""

    def __init__(self) -> None:
        self.table: dict[int, tuple[int, object, object]] = {}
        self.rows: list[int] = []
        self.total = 0
        self.cursor = 0
        self.cells = [_Cell(i) for i in range(SPREAD_OBJECTS)] if WORK_KIND == "spread" else []


def python_work(iterations: int, scratch: _Scratch) -> None:
    if WORK_KIND == "arithmetic":
        total = 0
        for i in range(iterations):
            total += (i * 7) & 63  # no object allocated or stored: small ints, locals
        scratch.total = total
        return
    if WORK_KIND == "spread":
        cells, start, total = scratch.cells, scratch.cursor, 0
        for i in range(start, start + iterations):
            total += cells[(i * 977) & (SPREAD_OBJECTS - 1)].value  # 977: lines apart
        scratch.cursor, scratch.total = start + iterations, total
        return
    table, rows = scratch.table, scratch.rows
    for i in range(iterations):
        table[i & 63] = (i, scratch, time.perf_counter)
        rows.append(i)
    if len(rows) > 10_000:
        rows.clear()


def timed_work(iterations: int, scratch: _Scratch) -> float:
    """One part of a step's work; its wall seconds."""
    started = time.perf_counter()
    python_work(iterations, scratch)
    return time.perf_counter() - started


def python_work_us(iterations: int, scratch: _Scratch, calls: int = 500) -> float:
    """The work's own CPU time per step (four quarters), timed alone."""
    started = time.process_time()
    for _ in range(calls):
        for _ in range(4):
            python_work(iterations, scratch)
    return (time.process_time() - started) / calls * 1e6


def pin_every_thread(core: int) -> None:
    """sched_setaffinity(0) moves only the calling thread: each thread of the process is
    moved by its id (threads started later inherit their creator's core)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
            os.sched_setaffinity(int(tid), {core})


def build() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if MODEL == "null":
        # The instrumentation's fixed cost: a step that does almost nothing.
        return torch.nn.Linear(8, 8), torch.randn(8, 8), torch.randn(8, 8)
    hidden = 384
    model = torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )
    return model, torch.randn(64, hidden), torch.randn(64, 10)


def main() -> None:
    model, x, y = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if TRACEML:
        import traceml_ai as traceml

        traceml.init(mode="auto")

        def step_block() -> contextlib.AbstractContextManager[object]:
            return traceml.trace_step(model)
    else:

        def step_block() -> contextlib.AbstractContextManager[object]:
            return contextlib.nullcontext()

    if START_AT:
        time.sleep(max(START_AT - time.time(), 0.0))
    if PIN_CORE is not None:
        pin_every_thread(int(PIN_CORE))
    scratch, quarter = _Scratch(), PYTHON_WORK // 4
    in_loop_us: list[float] = []
    phase_s: list[tuple[float, ...]] = []
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loop_start = time.time()
    starts, cpu = [], []
    for _ in range(STEPS + 1):
        starts.append(time.perf_counter())
        cpu.append(time.process_time())
        with step_block():
            if quarter:
                # The work's own time inside the loop (perf_counter: no system call), so the
                # step's added time splits into the work and what torch's ops lost to it.
                work_s = timed_work(quarter, scratch)
                opt.zero_grad(set_to_none=True)
                work_s += timed_work(quarter, scratch)
                out = model(x)
                work_s += timed_work(quarter, scratch)
                torch.nn.functional.mse_loss(out, y).backward()
                del out
                work_s += timed_work(quarter, scratch)
                opt.step()
                in_loop_us.append(work_s * 1e6)
                continue
            if PHASES:
                # Each call's wall time (perf_counter: no system call): where a tool's added
                # time lands, its own code or torch's ops after it (phase_costs.py).
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                t1 = time.perf_counter()
                out = model(x)
                t2 = time.perf_counter()
                loss = torch.nn.functional.mse_loss(out, y)
                t3 = time.perf_counter()
                loss.backward()
                t4 = time.perf_counter()
                opt.step()
                phase_s.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, time.perf_counter() - t4))
                del out, loss
                continue
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    loop_end = time.time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    steps_ms = [(b - a) * 1000.0 for a, b in itertools.pairwise(starts)]
    cpu_ms = [(b - a) * 1000.0 for a, b in itertools.pairwise(cpu)]
    if OUT:
        with open(OUT, "w") as fh:
            json.dump(
                {
                    "median_ms": statistics.median(steps_ms[WARMUP:]),
                    # The process's CPU time per step (every thread): on a loaded machine
                    # it moves far less than the wall time.
                    "cpu_median_ms": statistics.median(cpu_ms[WARMUP:]),
                    # The mean too: costs that come in bursts on a few steps (page faults, a
                    # flush) are in what the run takes, not in the median step.
                    "cpu_mean_ms": statistics.fmean(cpu_ms[WARMUP:]),
                    # When the loop ran (time.time()): whether two arms ran side by side.
                    "loop_start": loop_start,
                    "loop_end": loop_end,
                    # Page faults a step (minor: memory the allocator mapped anew).
                    "minor_faults_per_step": faults / (STEPS + 1),
                    "python_work_us": python_work_us(quarter, scratch) if quarter else 0.0,
                    # PEER_PHASES: each call's median wall time (us), in PHASE_NAMES' order.
                    "phase_us": [
                        statistics.median(p[k] for p in phase_s[WARMUP:]) * 1e6
                        for k in range(len(PHASE_NAMES))
                    ]
                    if phase_s
                    else None,
                    "python_work_in_loop_us": (
                        statistics.median(in_loop_us[WARMUP:]) if in_loop_us else 0.0
                    ),
                },
                fh,
            )


if __name__ == "__main__":
    main()
