"""The training script of `overhead.py --peers`: it times its own steps.

    python _peer_steps.py                      # plain
    perfdoctor profile --no-apply --profile-steps 0 --run-to-end _peer_steps.py
    traceml run _peer_steps.py                 # with PEER_TRACEML=1: trace_step(model)

Everything comes from the environment (PEER_MODEL null|mlp, PEER_STEPS, PEER_WARMUP,
PEER_OUT, PEER_TRACEML, PEER_START_AT), so no tool's own option parsing touches the script's
arguments. PEER_START_AT (a time.time() value) holds the loop until then: arms started
together then time their steps side by side, under the same load of a shared machine.
A step is one loop iteration, zero_grad through optimizer.step (inside TraceML's
`trace_step` block where it is on): the time between the starts of consecutive iterations,
so whatever a tool does at a step's edges is inside it. The medians of the steps after the
warm-up, wall and the process's CPU time (all threads), go to PEER_OUT as JSON.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import statistics
import time

import torch

MODEL = os.environ.get("PEER_MODEL", "null")
STEPS = int(os.environ.get("PEER_STEPS", "600"))
WARMUP = int(os.environ.get("PEER_WARMUP", "50"))
OUT = os.environ.get("PEER_OUT")
TRACEML = os.environ.get("PEER_TRACEML") == "1"
START_AT = float(os.environ.get("PEER_START_AT", "0"))


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
    loop_start = time.time()
    starts, cpu = [], []
    for _ in range(STEPS + 1):
        starts.append(time.perf_counter())
        cpu.append(time.process_time())
        with step_block():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    loop_end = time.time()
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
                    # When the loop ran (time.time()): whether two arms ran side by side.
                    "loop_start": loop_start,
                    "loop_end": loop_end,
                },
                fh,
            )


if __name__ == "__main__":
    main()
