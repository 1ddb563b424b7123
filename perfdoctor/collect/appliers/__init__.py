"""Runtime appliers: one per "runtime"/"env" optimization id of optimize/catalog.py.

The bootstrap calls `install(spec.optimizations, runtime)` before the script runs and writes
`applied_set.results()` into observations["applied"] at the end. Each result is
{"id", "applied", "verified", "detail"}: applied False is a refusal with its one-line reason;
verified True means the applier's check saw the change in effect at a later step.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from perfdoctor.collect.appliers import (
    allocator,
    backends,
    batch,
    compile_disable,
    cpu,
    cpu_precision,
    data,
    debug,
    optim,
    precision,
    transforms,
)
from perfdoctor.collect.appliers.base import (
    VERIFY_STEP,
    Applier,
    ApplyContext,
    Patcher,
    RuntimeLike,
    one_line,
)

log = logging.getLogger(__name__)

APPLIERS: dict[str, type[Applier]] = {
    cls.id: cls
    for module in (
        precision,
        backends,
        transforms,
        compile_disable,
        data,
        optim,
        debug,
        cpu,
        cpu_precision,
        allocator,
        batch,
    )
    for cls in module.APPLIERS
}
# Appliers that must install before others: the checkpoint wrapper has to sit inside the
# autocast wrapper of the same model (transforms run in this order at the first step).
_ORDER = {opt_id: index for index, opt_id in enumerate(APPLIERS)}


class AppliedSet:
    """The appliers installed in one child run."""

    def __init__(self, appliers: list[Applier], unknown: list[str], patcher: Patcher) -> None:
        self.appliers = appliers
        self.unknown = unknown
        self.patcher = patcher
        self._finalized = False
        # In-process A/B: the controller (collect/ab_switch.py) verifies each applier in
        # its on-blocks; at step 2 or at the end a fix may be switched off.
        self.controlled = False

    def on_step_start(self, step_index: int) -> None:
        if step_index == VERIFY_STEP and not self.controlled:
            for applier in self.appliers:
                applier.run_verify(final=False)

    def finalize(self) -> None:
        if self._finalized:
            return
        self._finalized = True
        if self.controlled:
            return
        for applier in self.appliers:
            applier.run_verify(final=True)

    def results(self) -> list[dict[str, Any]]:
        self.finalize()
        rows = [applier.result() for applier in self.appliers]
        rows.extend(
            {
                "id": opt_id,
                "applied": False,
                "verified": False,
                "detail": "no runtime applier: a manual change (see the recommendation)",
            }
            for opt_id in self.unknown
        )
        return rows

    def uninstall(self) -> None:
        """Undo every patch and hook (for in-process use; a child simply exits)."""
        self.patcher.restore()


def install(optimization_ids: Sequence[str], runtime: RuntimeLike) -> AppliedSet:
    patcher = Patcher()
    ctx = ApplyContext(runtime, patcher)
    known = sorted(
        (i for i in dict.fromkeys(optimization_ids) if i in APPLIERS), key=_ORDER.__getitem__
    )
    unknown = [i for i in dict.fromkeys(optimization_ids) if i not in APPLIERS]
    appliers: list[Applier] = []
    for opt_id in known:
        applier = APPLIERS[opt_id]()
        mark, shared = patcher.mark(), set(ctx.shared)
        try:
            applier.install(ctx)
        except Exception as exc:  # one broken applier must not take the run down
            log.warning("installing %s failed", opt_id, exc_info=True)
            patcher.rollback(mark)
            for key in set(ctx.shared) - shared:
                del ctx.shared[key]
            applier.refuse(f"applier failed: {type(exc).__name__}: {one_line(exc, 120)}")
        appliers.append(applier)
    applied_set = AppliedSet(appliers, unknown, patcher)
    runtime.on_step_start(applied_set.on_step_start)
    runtime.on_finalize(applied_set.finalize)
    return applied_set


__all__ = ["APPLIERS", "AppliedSet", "install"]
