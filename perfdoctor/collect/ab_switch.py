"""The child's side of in-process A/B: switch the fixes between steps, in blocks, and stop.

`ABController` follows optimize/inprocess.py's design: after the plan's warm-up (run as the
script is, every fix switched off), rounds of blocks, one block per arm still needed, in a
seeded random order. At each block's first step the appliers are switched to the arm's set;
at each block's end the appliers that were on are verified (their check sees the fix on what
the script uses), and at each round's end the stopping rule takes its look. When every
comparison has ended, or the budget is spent, the step tracker is told to end the plan after
this step, and the script is stopped as after any plan.

ab.json (rundir.AB_FILE) holds the blocks with their step times and each comparison's end:
the parent recomputes every figure from it with the same functions. It is rewritten after
each round, so a run that crashes or is stopped keeps the rounds it finished.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfdoctor import rundir
from perfdoctor.optimize.engine import Pair
from perfdoctor.optimize.inprocess import (
    ROUND_OVERRUN_FACTOR,
    SCRIPT_ENDED,
    ABDesign,
    Block,
    StoppingState,
    block_steps_for,
    load_ab_log,
    look,
    prior_pairs,
)
from perfdoctor.optimize.switchable import needs_warmup_block

log = logging.getLogger(__name__)


class ABController:
    def __init__(
        self,
        design: ABDesign,
        appliers: Sequence[Any],
        end_plan_after: Callable[[int], None],
        run_dir: Path,
        warmup_steps: int,
        clock: Callable[[], float] = time.perf_counter,
        drain: Callable[[], None] = lambda: None,
    ) -> None:
        """`drain`: waits for the device's queued work (a CUDA synchronize where the script
        uses CUDA), called at every block's end, so a block's steps carry its own GPU work
        and not the next block's; the next block's settling step absorbs the refill."""
        self.design = design
        self.appliers = {a.id: a for a in appliers}
        self._end_plan_after = end_plan_after
        self._path = run_dir / rundir.AB_FILE
        self._warmup = max(0, warmup_steps)
        self._clock = clock
        self._drain = drain
        prior, prior_s = _prior(design)
        self.stopping = StoppingState(design, prior=prior, prior_measure_s=prior_s)
        self.blocks: list[Block] = []
        self.block_steps = design.block_steps or 0
        self.rounds = 0
        self.stop_reason: str | None = None
        self.measure_s = 0.0  # counted blocks' time: what the budget is spent on
        self.warmup_blocks_s = 0.0  # the arms' first blocks
        self.switches = 0
        self._warmup_ms: list[float] = []
        self._order: list[int] = []  # arms of the current round still to run
        self._block: dict[str, Any] | None = None  # the block in progress
        self._started_arms: set[int] = set()
        self._active: set[str] | None = None
        self._finished = False
        self._unswitchable = sorted(
            i
            for arm in design.arms
            for i in arm.optimizations
            if i not in self.appliers or not getattr(self.appliers[i], "switchable", False)
        )
        # The warm-up runs the script as it is.
        self._activate(-1)

    # ------------------------------------------------------------------ arms

    def _activate(self, arm: int) -> None:
        wanted = set(self.design.arms[arm].optimizations) if arm >= 0 else set()
        if wanted == self._active:
            return
        for opt_id, applier in self.appliers.items():
            if not getattr(applier, "switchable", False) or applier.applied is False:
                continue
            on = opt_id in wanted
            if self._active is None or (opt_id in self._active) != on:
                try:
                    applier.switch(on)
                except Exception as exc:  # a broken switch ends its comparisons, not the run
                    log.warning("switching %s failed", opt_id, exc_info=True)
                    applier.refuse(f"switch failed: {type(exc).__name__}: {exc}")
        self._active = wanted
        self.switches += 1

    def active_label(self) -> str | None:
        block = self._block
        return self.design.arms[block["arm"]].label if block is not None else None

    # ------------------------------------------------------------------ steps

    def step_started(self, index: int) -> None:
        if self._finished or index < self._warmup:
            return
        if self._block is None:
            self._next_block(index)

    def step_closed(self, index: int, wall_s: float) -> None:
        if self._finished:
            return
        if index < self._warmup:
            self._warmup_ms.append(wall_s * 1000.0)
            return
        block = self._block
        if block is None:
            return
        block["step_ms"].append(round(wall_s * 1000.0, 4))
        if len(block["step_ms"]) < block["length"]:
            return
        try:
            self._drain()
        except Exception:  # a device error surfaces in the script's next call
            log.debug("drain failed", exc_info=True)
        self._close_block(index)

    def _next_block(self, index: int) -> None:
        if not self.block_steps:
            median_ms = statistics.median(self._warmup_ms) if self._warmup_ms else None
            self.block_steps = block_steps_for(
                median_ms / 1000.0 if median_ms else None, self.design.statistic
            )
        if not self._order:
            self.rounds += 1
            self._start_round()
            if not self._order:
                # Every comparison ended before measuring (each fix refused, say cpu-threads
                # at the first step: "nothing to change"): the script as it is, to the end.
                self.rounds -= 1
                self._stop(index, "no comparison left to measure")
                return
        arm = self._order.pop(0)
        # Only a fix with a costly first activation (a compile) spends its first block
        # uncounted; the settling steps absorb every other switch (optimize/switchable.py).
        first = arm not in self._started_arms and needs_warmup_block(
            self.design.arms[arm].optimizations
        )
        self._started_arms.add(arm)
        self._activate(arm)
        self._block = {
            "round": self.rounds,
            "arm": arm,
            "first_step": index,
            "step_ms": [],
            "settle": self.design.settle_steps,
            "arm_warmup": first,
            "length": self.design.settle_steps + self.block_steps,
            "started": self._clock(),
        }

    def _start_round(self) -> None:
        for state in self.stopping.open:
            missing = [
                i
                for i in self.design.arms[state.comparison.test].optimizations
                if i in self._unswitchable
            ]
            refused = [
                f"{i}: {self.appliers[i].detail}"
                for i in self.design.arms[state.comparison.test].optimizations
                if i in self.appliers and self.appliers[i].applied is False
            ]
            if missing:
                self.stopping.end(state.comparison.label, f"cannot switch: {', '.join(missing)}", 0)
            elif refused:
                self.stopping.end(state.comparison.label, f"not applied: {'; '.join(refused)}", 0)
        order = self.stopping.arms_needed()
        random.Random(f"{self.design.seed}:{self.rounds}").shuffle(order)
        self._order = order

    def _close_block(self, index: int) -> None:
        block = self._block
        assert block is not None
        self._block = None
        elapsed = self._clock() - block.pop("started")
        block.pop("length")
        self.blocks.append(Block(**{**block, "step_ms": tuple(block["step_ms"])}))
        if block["arm_warmup"]:
            self.warmup_blocks_s += elapsed
        else:
            self.measure_s += elapsed
        for opt_id in self.design.arms[block["arm"]].optimizations:
            applier = self.appliers.get(opt_id)
            if applier is not None and not block["arm_warmup"]:
                applier.run_verify(final=False)
        if self._order:
            if self.rounds < 2 or self.measure_s < ROUND_OVERRUN_FACTOR * self.design.budget_s:
                return  # the first round always ends: every verdict needs its pairs
            # A later round runs far past the budget (a loaded machine): it ends here.
            self._order = []
            self.stopping.close_all(self.rounds, self.blocks, "budget")
            self._stop(index, f"the {self.design.budget_s:g}s budget was spent within a round")
            return
        # The round is over: look, and stop when nothing is left to measure.
        self.stopping.after_round(self.rounds, self.blocks, self.measure_s)
        if not self.stopping.open:
            self._stop(index, "every comparison decided")
        elif self.measure_s >= self.design.budget_s:
            self.stopping.close_all(self.rounds, self.blocks, "budget")
            self._stop(index, f"the {self.design.budget_s:g}s budget was spent")
        elif self.rounds >= self.design.max_rounds:
            self.stopping.close_all(self.rounds, self.blocks, "max rounds")
            self._stop(index, f"{self.design.max_rounds} rounds")
        else:
            self.write()

    def _stop(self, index: int, why: str) -> None:
        self.stop_reason = why
        self._finished = True
        self._activate(0)  # the script as it is for whatever runs after the plan
        self._end_plan_after(index + 1)
        self.write()

    def finish(self) -> None:
        """The run ends (the plan, the script's own end, a crash): the last look and ab.json."""
        if not self._finished:
            self._finished = True
            self.stopping.close_all(self.rounds, self.blocks, SCRIPT_ENDED)
            self.stop_reason = self.stop_reason or "the script ended first"
        self.write()

    # ------------------------------------------------------------------ status

    def status_line(self) -> str | None:
        """A short line for the live display: pairs so far and each open interval."""
        parts = []
        for state in self.stopping.states:
            result = state.estimate or look(self.design, self.blocks, state.comparison, state.prior)
            label = state.comparison.label
            if result is None:
                parts.append(f"{label}: {self.rounds} rounds")
            else:
                parts.append(
                    f"{label} {result.speedup:.2f}x [{result.low:.2f}, {result.high:.2f}] "
                    f"{result.pairs} pairs" + (f" {state.ended}" if state.ended else "")
                )
        return "; ".join(parts) or None

    def to_json(self) -> dict[str, Any]:
        return {
            "design": dataclasses.asdict(self.design),
            "block_steps": self.block_steps,
            "rounds": self.rounds,
            "measure_s": round(self.measure_s, 4),
            "warmup_blocks_s": round(self.warmup_blocks_s, 4),
            "stop_reason": self.stop_reason,
            "comparisons": [
                {
                    "label": s.comparison.label,
                    "ended": s.ended,
                    "rounds": s.rounds,
                    "looks": s.looks_taken,
                }
                for s in self.stopping.states
            ],
            "blocks": [dataclasses.asdict(b) for b in self.blocks],
        }

    def write(self) -> None:
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.to_json()))
            os.replace(tmp, self._path)
        except OSError:
            log.debug("ab.json not written", exc_info=True)


def _prior(design: ABDesign) -> tuple[dict[str, tuple[Pair, ...]], float]:
    """The pairs earlier processes measured for these comparisons (design.prior_runs), so
    this run's looks count the pooled pairs. An earlier run that left no readable ab.json
    adds nothing."""
    logs = []
    for run in design.prior_runs:
        try:
            found = load_ab_log(Path(run))
        except Exception:  # a corrupt log costs its pairs, not the run
            log.warning("earlier A/B run %s not read", run, exc_info=True)
            continue
        if found is not None:
            logs.append(found)
    return prior_pairs(logs), sum(found.measure_s for found in logs)
