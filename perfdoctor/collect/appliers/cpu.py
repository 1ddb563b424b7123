"""CPU intra-op threads = usable cores minus DataLoader workers (minus the cores other
processes kept busy in the baseline, PERFDOCTOR_CPU_THREADS_RESERVE): up or down.

Decision (documented in the report detail): the applier sets torch's intra-op threads to the
cores this process may run on, less one per DataLoader worker process once the loaders are
known (at the first optimizer step; the rules and optimize/sizing.cpu_threads_target count
the same way: one CPU budget), and HOLDS that number: a later torch.set_num_threads(n) from
the script is ignored in the main process. Scripts that lower threads mostly do so as a leftover
(OMP_NUM_THREADS=1 in a launcher, a copied snippet); measuring the script with its cores in
use is the point of this variant. Calls from DataLoader worker processes (a different pid;
torch sets 1 thread there on purpose) and from torch itself pass through. This applier is the
only one that changes the thread count: the dataloader-workers variant changes num_workers
alone and leaves the script's threads, so each variant's effect is its own (stacked with it,
this one holds the usable cores less its workers). When the script already runs that many
threads, nothing changes and the applier refuses.
"""

from __future__ import annotations

import os
import sys

import torch

from perfdoctor.collect.appliers.base import (
    THREADS_RETARGET_KEY,
    TWIN_WORKERS_KEY,
    Applier,
    ApplyContext,
    usable_cores,
)
from perfdoctor.optimize.sizing import COUPLED_DETAIL, THREADS_RESERVE_ENV


class CpuThreads(Applier):
    """Switchable (in-process A/B): off, the script's own thread count is back (the last
    one it asked for, else the count at start-up); on, the target is held again. In a
    coupled arm (dataloader-workers' twin loader on as well) the target counts the twin's
    workers instead of the script's: the workers with the threads the cores leave them."""

    id = "cpu-threads"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        # Cores other processes kept busy in the baseline (optimize/sizing.py): left to them,
        # so on a busy machine the count may go down as well as up.
        try:
            reserve = max(0, int(os.environ.get(THREADS_RESERVE_ENV, "0")))
        except ValueError:
            reserve = 0
        self.reserve = reserve
        self.ctx = ctx
        self.script_workers = 0  # the script's own loaders' workers, known at the first step
        self.roots_known = False
        self.target = max(1, usable_cores() - reserve)
        self.script_requests: list[int] = []
        self.active = True
        before = torch.get_num_threads()
        original = self._set = torch.set_num_threads
        applier = self

        def set_num_threads(n: int) -> None:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if os.getpid() != ctx.install_pid or caller.startswith(("torch", "perfdoctor")):
                original(n)
                return
            applier.script_requests.append(int(n))
            original(applier.target if applier.active else int(n))

        ctx.patcher.patch(torch, "set_num_threads", set_num_threads)
        ctx.shared[THREADS_RETARGET_KEY] = self.retarget
        original(self.target)
        self.mark_applied(
            f"intra-op threads held at {self.target} (usable cores"
            + (f" less {reserve} busy with other processes" if reserve else "")
            + f"; {before} at startup)"
        )
        self.before = before

        def at_first_step(roots: object, optimizers: object) -> None:
            self.script_workers = max(
                (int(getattr(x, "num_workers", 0) or 0) for x in ctx.runtime.dataloaders),
                default=0,
            )
            self.roots_known = True
            alone = self._target_beside(self.script_workers)
            twin = self._twin_workers(always=True)
            coupled = self._target_beside(twin) if twin is not None else None
            self.retarget()
            usable = usable_cores()
            if self.script_workers or reserve:
                minus = [f"{self.script_workers} DataLoader workers"] if self.script_workers else []
                minus += [f"{reserve} cores other processes kept busy"] if reserve else []
                detail = (
                    f"intra-op threads held at {alone} ({usable} usable cores minus "
                    f"{' and '.join(minus)}; {before} at startup)"
                )
            else:
                detail = self.detail
            if coupled is not None:
                detail += f"; {COUPLED_DETAIL.format(workers=twin, threads=coupled)}"
            self.mark_applied(detail)
            if (
                alone == before
                and coupled in (None, before)
                and not any(n != before for n in self.script_requests)
            ):
                # Nothing differs from the unmodified script: say so rather than time noise.
                self.refuse(f"nothing to change: the script already runs {before} threads")

        ctx.when_roots_known(self, at_first_step)

    def _target_beside(self, workers: int) -> int:
        return max(1, usable_cores() - workers - self.reserve)

    def _twin_workers(self, always: bool = False) -> int | None:
        """The workers of dataloader-workers' twin loader: while they feed the steps, or
        (always) whenever a twin exists in this process."""
        feeding = self.ctx.shared.get(TWIN_WORKERS_KEY)
        if not callable(feeding):
            return None
        owner = getattr(feeding, "__self__", None)
        if always and owner is not None and owner.applied is not False and owner.twins:
            return int(owner.workers)
        workers = feeding()
        return int(workers) if workers is not None else None

    def retarget(self) -> None:
        """The count for what feeds the steps now: the twin's workers while it is on (a
        coupled arm), else the script's own loaders' workers."""
        if not self.roots_known:
            return
        twin = self._twin_workers()
        self.target = self._target_beside(twin if twin is not None else self.script_workers)
        if self.active:
            self._set(self.target)

    def script_threads(self) -> int:
        """What the unmodified script would run with now."""
        return self.script_requests[-1] if self.script_requests else self.before

    def switch(self, on: bool) -> None:
        self.active = on
        self.retarget()
        self._set(self.target if on else self.script_threads())

    def verify(self, final: bool) -> tuple[bool, str] | None:
        threads = torch.get_num_threads()
        asked = (
            f"; the script asked for {sorted(set(self.script_requests))}, held at {self.target}"
            if self.script_requests
            else ""
        )
        return threads == self.target, f"torch.get_num_threads() reads {threads}{asked}"


APPLIERS: tuple[type[Applier], ...] = (CpuThreads,)
