"""CPU intra-op threads = usable cores.

Decision (documented in the report detail): the applier sets torch's intra-op threads to the
cores this process may run on and HOLDS that number: a later torch.set_num_threads(n) from
the script is ignored in the main process. Scripts that lower threads mostly do so as a
leftover (OMP_NUM_THREADS=1 in a launcher, a copied snippet); measuring the script with its
cores in use is the point of this variant. Calls from DataLoader worker processes (a
different pid; torch sets 1 thread there on purpose) and from torch itself pass through.
"""

from __future__ import annotations

import os
import sys

import torch

from perfdoctor.collect.appliers.base import Applier, ApplyContext, usable_cores


class CpuThreads(Applier):
    id = "cpu-threads"

    def install(self, ctx: ApplyContext) -> None:
        self.target = usable_cores()
        self.script_requests: list[int] = []
        before = torch.get_num_threads()
        original = torch.set_num_threads
        applier = self

        def set_num_threads(n: int) -> None:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if os.getpid() != ctx.install_pid or caller.startswith("torch"):
                original(n)
                return
            applier.script_requests.append(int(n))
            original(applier.target)

        ctx.patcher.patch(torch, "set_num_threads", set_num_threads)
        original(self.target)
        self.mark_applied(
            f"intra-op threads held at {self.target} (usable cores; {before} at startup)"
        )
        ctx.when_roots_known(self, lambda roots, optimizers: original(self.target))

    def verify(self, final: bool) -> tuple[bool, str] | None:
        threads = torch.get_num_threads()
        asked = (
            f"; the script asked for {sorted(set(self.script_requests))}, held at {self.target}"
            if self.script_requests
            else ""
        )
        return threads == self.target, f"torch.get_num_threads() reads {threads}{asked}"


APPLIERS: tuple[type[Applier], ...] = (CpuThreads,)
