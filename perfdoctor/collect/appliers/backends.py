"""cuDNN flag appliers: benchmark on, determinism off.

Flags are set at install (iteration 1 already benefits) and again at the first optimizer step,
after the script's own setup, which commonly sets them. Scripts may reset a flag later, so
the check reads it again at a later step and at the end of the run.
"""

from __future__ import annotations

from typing import Any

import torch

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import Applier, ApplyContext


class CudnnBenchmark(Applier):
    id = "cudnn-benchmark"

    def install(self, ctx: ApplyContext) -> None:
        if not base.cuda_available():
            self.refuse("cuDNN autotuning needs a CUDA device; this run has none")
            return
        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        self.mark_applied(f"torch.backends.cudnn.benchmark {before} -> True")
        ctx.when_roots_known(self, self._after_setup)

    def _after_setup(self, roots: list[Any], optimizers: list[Any]) -> None:
        torch.backends.cudnn.benchmark = True

    def verify(self, final: bool) -> tuple[bool, str] | None:
        value = torch.backends.cudnn.benchmark
        return bool(value), f"cudnn.benchmark reads {value}"


class CudnnNondeterministic(Applier):
    id = "cudnn-nondeterministic"

    def install(self, ctx: ApplyContext) -> None:
        if not base.cuda_available():
            self.refuse("cuDNN determinism only matters on a CUDA device; this run has none")
            return
        self._relax()
        self.mark_applied("cudnn.deterministic and deterministic algorithms -> False")
        ctx.when_roots_known(self, lambda roots, optimizers: self._relax())

    def _relax(self) -> None:
        torch.backends.cudnn.deterministic = False
        torch.use_deterministic_algorithms(False)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        cudnn = bool(torch.backends.cudnn.deterministic)
        algorithms = torch.are_deterministic_algorithms_enabled()
        ok = not cudnn and not algorithms
        return ok, f"cudnn.deterministic={cudnn}, deterministic algorithms={algorithms}"


APPLIERS: tuple[type[Applier], ...] = (CudnnBenchmark, CudnnNondeterministic)
