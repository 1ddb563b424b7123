"""What a step holds besides training, for the loop account (analyze/loop_account.py).

The step tracker (probes_steps.py) adds up, per step, the root forwards of a model in eval
mode (evaluation), those under no_grad of a model in train mode (rollouts, generation), and
here the time in torch.save (checkpoints). The step row carries them as `eval_forward_ms`,
`nograd_forward_ms` and `save_ms`, absent when zero so that steps.jsonl stays as small as
before for a loop that only trains.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from perfdoctor.collect.probes_steps import ClosedStep, StepTracker

_NONE: dict[str, float] = {}


def loop_fields(step: ClosedStep) -> dict[str, float]:
    """The step row's loop-account fields (ms), only those that are not zero."""
    if not (step.eval_forward_s or step.nograd_forward_s or step.save_s):
        return _NONE  # a training step: once per step, so no dict is built
    found = {
        "eval_forward_ms": step.eval_forward_s,
        "nograd_forward_ms": step.nograd_forward_s,
        "save_ms": step.save_s,
    }
    return {key: round(value * 1000.0, 4) for key, value in found.items() if value > 0}


def install_save_timer(tracker: StepTracker, torch: Any, is_compiling: Any) -> None:
    """Time torch.save (and torch.serialization.save, the same function): a checkpoint
    written inside the loop is a cost of the loop. A nested call (a save inside a save) is
    timed once, by the outer call."""
    original = torch.serialization.save
    if getattr(original, "__perfdoctor__", False):
        return
    depth = [0]

    @functools.wraps(original)
    def save(*args: Any, **kwargs: Any) -> Any:
        if depth[0] or is_compiling():
            return original(*args, **kwargs)
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            tracker.save_time(time.perf_counter() - t0)

    save.__perfdoctor__ = True  # type: ignore[attr-defined]
    torch.serialization.save = save
    if torch.save is original:
        torch.save = save
