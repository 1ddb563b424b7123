"""One step's FLOPs, counted with torch.utils.flop_counter.FlopCounterMode inside the last
warm-up step.

Why a warm-up step of the script's own: running an extra forward/backward to count would add
into the user's .grad, step their optimizer state or RNG, and is not what the script does.
FlopCounterMode is a dispatch mode wrapped around the step the script runs anyway; it
counts each aten op's FLOPs (its registered formulas) and changes no numerics. The counted
step is slower (every op passes through Python), which is why it is a warm-up step: the
timed steps that follow run without it. Its cost, the counted step's wall time against the
warm-up step before it, is recorded.

Never the first step: lazy initialisation, cuDNN autotuning and torch.compile's first
compilation happen there, and compiling with a dispatch mode on would leave a recompilation
for a timed step. So at least two warm-up steps are needed.

Skipped, with the reason, when counting is unsafe or meaningless: fewer than two warm-up
steps; torch.compile already ran (a dispatch mode is part of Dynamo's guards, so entering one
would recompile, and compiled graphs bypass the counter anyway); the step opened and closed on
different threads; or the counter failed.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

TOP_OPS = 10


FLOPS_SKIPPED_IN_AB = "an in-process A/B run: its steps mix the arms, and no figure reads it"


class StepFlopCounter:
    def __init__(
        self, torch: Any, warmup_steps: int, enabled: bool = True, skipped: str | None = None
    ) -> None:
        self.torch = torch
        self.index = warmup_steps - 1 if warmup_steps >= 2 else None
        self.mode: Any = None
        self.thread: int | None = None
        self.started = 0.0
        self.previous_step_ms: float | None = None
        self.info: dict[str, Any] = {"method": "torch.utils.flop_counter.FlopCounterMode"}
        if not enabled:
            self.info["skipped"] = "turned off (PERFDOCTOR_FLOP_COUNT=0)"
        elif skipped is not None:
            self.info["skipped"] = skipped
        elif self.index is None:
            self.info["skipped"] = (
                "fewer than 2 warm-up steps: the first step is never counted, nor a timed one"
            )

    def step_started(self, index: int) -> None:
        if index != self.index or "skipped" in self.info or self.mode is not None:
            return
        why = self._unsafe()
        if why is not None:
            self.info["skipped"] = why
            return
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self.mode = FlopCounterMode(display=False)
            self.mode.__enter__()
        except Exception as exc:  # a torch without the counter, or one that refuses
            self.mode = None
            self.info["skipped"] = f"FlopCounterMode failed to start: {type(exc).__name__}: {exc}"
            return
        self.thread = threading.get_ident()
        self.started = time.perf_counter()
        self.info["step"] = index

    def step_closed(self, index: int, wall_s: float) -> None:
        if self.index is not None and index == self.index - 1:
            self.previous_step_ms = wall_s * 1000.0
        if self.mode is None or index != self.index:
            return
        if threading.get_ident() != self.thread:
            # A dispatch mode lives on its thread's mode stack: it can only be left there.
            self.info["skipped"] = "the counted step closed on another thread"
            return
        mode, self.mode = self.mode, None
        try:
            mode.__exit__(None, None, None)
            counts = mode.get_flop_counts().get("Global", {})
            total = int(mode.get_total_flops())
        except Exception as exc:
            self.info["skipped"] = f"FlopCounterMode failed: {type(exc).__name__}: {exc}"
            return
        by_op = sorted(((str(op), int(n)) for op, n in counts.items()), key=lambda kv: -kv[1])
        self.info.update(
            {
                "flops_per_step": total,
                "by_op": dict(by_op[:TOP_OPS]),
                "counted_step_ms": wall_s * 1000.0,
                "previous_step_ms": self.previous_step_ms,
            }
        )

    def stop(self, why: str) -> None:
        """The plan or the script ended with the counter still on."""
        if self.mode is None:
            return
        mode, self.mode = self.mode, None
        if threading.get_ident() == self.thread:
            try:
                mode.__exit__(None, None, None)
            except Exception:
                log.debug("FlopCounterMode exit failed", exc_info=True)
        self.info["skipped"] = f"the counted step did not finish ({why})"

    def _unsafe(self) -> str | None:
        if "torch._dynamo" not in sys.modules:
            return None  # never imported here: importing it is slow and nothing compiled
        try:
            from torch._dynamo.utils import counters

            if counters["stats"]["unique_graphs"] > 0 or counters["frames"].get("ok", 0) > 0:
                return (
                    "torch.compile is in use: entering a dispatch mode would recompile, and "
                    "compiled graphs bypass the counter"
                )
        except Exception:
            log.debug("no dynamo counters", exc_info=True)
        return None
