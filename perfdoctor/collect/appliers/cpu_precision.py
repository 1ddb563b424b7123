"""fp32 on a CPU without native bf16/fp16: the script's CPU autocast regions run disabled.

On a CPU without AVX512-BF16/AMX (or AVX512-FP16/AMX-FP16 for fp16), autocast's low-precision
matmuls are converted and emulated, several times slower than fp32 (issue 24): this variant
measures the script without them. Each `torch.autocast('cpu', ...)` entered by the script is
entered disabled; CUDA autocast is left alone. Switchable: off, the region's own `enabled`
is back at its next entry.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from perfdoctor.collect.appliers.base import Applier, ApplyContext, is_compiling


class CpuFp32(Applier):
    id = "cpu-fp32"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.active = True
        self.disabled_entries = 0
        autocast_cls = torch.amp.autocast
        original_enter = autocast_cls.__enter__
        applier = self

        @functools.wraps(original_enter)
        def enter(region: Any) -> Any:
            own = bool(getattr(region, "_enabled", False))
            cpu = str(getattr(region, "device", "")) == "cpu"
            if not (own and cpu and applier.active) or is_compiling():
                return original_enter(region)
            applier.disabled_entries += 1
            # __enter__ reads `_enabled` once (__exit__ restores the state it saved), so the
            # script's own flag is back on the instance as soon as the region is entered.
            region._enabled = False
            try:
                return original_enter(region)
            finally:
                region._enabled = own

        ctx.patcher.patch(autocast_cls, "__enter__", enter)
        self.mark_applied("CPU autocast regions entered with enabled=False (fp32)")

    def switch(self, on: bool) -> None:
        self.active = on

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if self.disabled_entries == 0:
            if final:
                self.refuse("the script never entered an enabled CPU autocast region")
            return None
        # Checked at step starts, outside the regions: the count of entries it turned to
        # fp32 is the evidence that the script's regions went through it.
        return True, f"{self.disabled_entries} CPU autocast entries ran in fp32"


APPLIERS: tuple[type[Applier], ...] = (CpuFp32,)
