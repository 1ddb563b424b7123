"""cuDNN flag appliers: benchmark on, determinism off.

Flags are set at install (iteration 1 already benefits) and again at the first optimizer step,
after the script's own setup, which commonly sets them. Scripts may reset a flag later, so
the check reads it again at a later step and at the end of the run.

Both switch between steps (in-process A/B): the script's own assignments (and its
torch.use_deterministic_algorithms calls) go through as before and are remembered, so
switched off the flags read what the unmodified script would have set by then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import Applier, ApplyContext, called_from_library
from perfdoctor.collect.appliers.held import HeldSetting


def _cudnn_flag(name: str) -> Any:
    """The ContextProp behind torch.backends.cudnn.<name>: the C flag's getter and setter."""
    return vars(type(torch.backends.cudnn))[name]


class _ScriptAssignment:
    """Stands in for a torch.backends.cudnn flag: assignments go through, and the script's
    own are reported."""

    def __init__(self, flag: Any, changed: Callable[[], None]) -> None:
        self.flag = flag
        self.changed = changed

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.flag.__get__(obj, objtype)

    def __set__(self, obj: Any, value: Any) -> None:
        self.flag.__set__(obj, value)
        if not called_from_library():
            self.changed()


def _watch_cudnn_flag(ctx: ApplyContext, name: str, setting: HeldSetting[Any]) -> None:
    flag = _cudnn_flag(name)
    ctx.patcher.patch(
        type(torch.backends.cudnn), name, _ScriptAssignment(flag, setting.script_changed)
    )


class _CudnnFlags(Applier):
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.active = True
        self.setting: HeldSetting[Any] | None = None

    def _after_setup(self, roots: list[Any], optimizers: list[Any]) -> None:
        if self.active and self.setting is not None:
            self.setting.hold()

    def switch(self, on: bool) -> None:
        self.active = on
        if self.setting is None:  # refused: the script's flags were never touched
            return
        if on:
            self.setting.hold()
        else:
            self.setting.release()


class CudnnBenchmark(_CudnnFlags):
    id = "cudnn-benchmark"

    def install(self, ctx: ApplyContext) -> None:
        super().install(ctx)
        if not base.cuda_available():
            self.refuse("cuDNN autotuning needs a CUDA device; this run has none")
            return
        flag = _cudnn_flag("benchmark")
        self.setting = setting = HeldSetting(lambda: bool(flag.getter()), flag.setter, True)
        _watch_cudnn_flag(ctx, "benchmark", setting)
        setting.hold()
        self.mark_applied(f"torch.backends.cudnn.benchmark {setting.wish} -> True")
        ctx.when_roots_known(self, self._after_setup)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        value = torch.backends.cudnn.benchmark
        return bool(value), f"cudnn.benchmark reads {value}"


# (cudnn.deterministic, deterministic algorithms, their warn_only)
Determinism = tuple[bool, bool, bool]


class CudnnNondeterministic(_CudnnFlags):
    id = "cudnn-nondeterministic"

    def install(self, ctx: ApplyContext) -> None:
        super().install(ctx)
        if not base.cuda_available():
            self.refuse("cuDNN determinism only matters on a CUDA device; this run has none")
            return
        flag = _cudnn_flag("deterministic")
        use_deterministic = torch.use_deterministic_algorithms

        def read() -> Determinism:
            return (
                bool(flag.getter()),
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            )

        def write(value: Determinism) -> None:
            flag.setter(value[0])
            use_deterministic(value[1], warn_only=value[2])

        self.setting = setting = HeldSetting(read, write, (False, False, False))
        _watch_cudnn_flag(ctx, "deterministic", setting)

        def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
            use_deterministic(mode, warn_only=warn_only)
            if not called_from_library():
                setting.script_changed()

        ctx.patcher.patch(torch, "use_deterministic_algorithms", use_deterministic_algorithms)
        setting.hold()
        self.mark_applied("cudnn.deterministic and deterministic algorithms -> False")
        ctx.when_roots_known(self, self._after_setup)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        cudnn = bool(torch.backends.cudnn.deterministic)
        algorithms = torch.are_deterministic_algorithms_enabled()
        ok = not cudnn and not algorithms
        return ok, f"cudnn.deterministic={cudnn}, deterministic algorithms={algorithms}"


APPLIERS: tuple[type[Applier], ...] = (CudnnBenchmark, CudnnNondeterministic)
