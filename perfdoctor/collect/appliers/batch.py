"""batch-size: a --plan-batch child run at another batch size, and the peaks it reaches.

Two jobs in one applier, because every plan run needs both:
- the batch: with PERFDOCTOR_BATCH_SIZE set, DataLoaders built with the baseline's batch
  size (PERFDOCTOR_BATCH_FROM) are built with the new one instead, through the
  DataLoader.__init__ patch the data appliers share (data.LoaderPatch). A loader with a
  batch_sampler, or another batch size (evaluation), is left alone. Without the variable
  the script's own batch-size argument was changed by the parent (optimize/batch_knob.py)
  and this applier only measures.
- the peaks, written to batch_probe.json at the end: the process RSS high-water mark
  (VmHWM), read when the first step starts and then reset (writing 5 to
  /proc/self/clear_refs, Linux 4.0+), so the training's peak is apart from the setup's
  (imports, a dataset read whole and then dropped); on CUDA, torch's max allocated and
  reserved, reset at the same moment. DataLoader worker processes have RSS of their own,
  not counted here (the parent's CPU samples hold them).

- gradient accumulation: with PERFDOCTOR_ACCUMULATE=k, every optimizer built steps once
  per k of the script's step() calls, with the summed gradients divided by k (the mean, as
  `loss / k` would give), and zero_grad (the optimizer's or a module's) only after a real
  step. The global step hooks fire inside the real step only, so a perfdoctor step is one
  optimizer update of k micro-batches (backward calls counted between). Not exact where the
  script clips gradient norms (it sees the sum) or steps an LR scheduler per call.

Not switchable between steps: a DataLoader's batch size is fixed when its iterator starts
(the sampler's batches are drawn by the iterator, and a script's argument is read once),
so batch sizes are compared by re-runs (optimize/batch_fit.py, perfdoctor/batch_plan.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from perfdoctor import rundir
from perfdoctor.collect.appliers.base import Applier, ApplyContext, one_line
from perfdoctor.collect.appliers.data import LoaderPatch, _where
from perfdoctor.optimize.batch_knob import ACCUMULATE_ENV, BATCH_ENV, BATCH_FROM_ENV
from perfdoctor.run_schema import BatchProbe, encode_line

_KIB = 1024


def _status_kib(field: str) -> int | None:
    """A `VmHWM:`-style line of /proc/self/status, in bytes; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * _KIB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * _KIB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def _int_env(name: str) -> int | None:
    try:
        value = int(os.environ.get(name, "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


class BatchSize(Applier):
    id = "batch-size"

    def install(self, ctx: ApplyContext) -> None:
        self.target = _int_env(BATCH_ENV)
        self.source = _int_env(BATCH_FROM_ENV)
        spec = getattr(ctx.runtime, "spec", None)
        self.run_dir = Path(spec.run_dir) if spec is not None else None
        self.probe = BatchProbe(batch_size=self.target)
        self.started = False
        self.pid = ctx.install_pid
        self.changed: list[str] = []
        ctx.runtime.on_step_start(self._on_step_start)
        ctx.runtime.on_finalize(self._write_probe)
        self.accumulate = _int_env(ACCUMULATE_ENV) or 1
        self.accumulating: list[_Accumulation] = []
        if self.accumulate > 1:
            self._install_accumulation(ctx)
        if self.target is None:
            self.probe.knob = "argument"
            self.mark_applied("batch set by the script's own argument; peaks measured")
            return
        self.probe.knob = "dataloader"
        self.patch = LoaderPatch.shared(ctx)
        self.patch.adjusters.append((self, self._adjust))

    def _adjust(self, loader: DataLoader, args: dict[str, Any]) -> dict[str, Any] | None:
        where = _where()
        if args.get("batch_sampler") is not None:
            self.note(f"{where}: left alone (a batch_sampler sets its batches)")
            return None
        size = args.get("batch_size", 1)
        if self.source is not None and size != self.source:
            self.note(f"{where}: left alone (batch_size={size}, not the training loader's)")
            return None
        change = f"{where}: batch_size {size} -> {self.target}"
        self.changed.append(change)
        if self.applied:
            self.note(change)
        else:
            self.mark_applied(change)
        return {"batch_size": self.target}

    def _install_accumulation(self, ctx: ApplyContext) -> None:
        applier = self
        original_init = torch.optim.Optimizer.__init__

        def init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            applier.accumulating.append(_Accumulation(optimizer, applier.accumulate))

        def module_zero_grad(module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            if not any(acc.between for acc in applier.accumulating):
                original_zero_grad(module, *args, **kwargs)

        ctx.patcher.patch(torch.optim.Optimizer, "__init__", init)
        original_zero_grad = ctx.patcher.patch(torch.nn.Module, "zero_grad", module_zero_grad)
        self.probe.accumulate = self.accumulate

    def _on_step_start(self, index: int) -> None:
        if self.started or os.getpid() != self.pid:
            return
        self.started = True
        self.probe.rss_setup_peak_bytes = _status_kib("VmHWM")
        self.probe.mem_available_bytes = _mem_available()
        self.probe.rss_reset = _reset_hwm()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            device = torch.cuda.current_device()
            self.probe.cuda_total_bytes = int(torch.cuda.get_device_properties(device).total_memory)
            torch.cuda.reset_peak_memory_stats(device)

    def _write_probe(self) -> None:
        if os.getpid() != self.pid or self.run_dir is None:
            return
        self.probe.rss_train_peak_bytes = _status_kib("VmHWM")
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.probe.cuda_max_allocated_bytes = int(torch.cuda.max_memory_allocated())
            self.probe.cuda_max_reserved_bytes = int(torch.cuda.max_memory_reserved())
        try:
            (self.run_dir / rundir.BATCH_PROBE_FILE).write_bytes(encode_line(self.probe))
        except OSError as exc:  # the run's own record matters more
            self.note(f"batch_probe.json not written: {one_line(exc, 100)}")

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if self.accumulate > 1:
            updates = sum(acc.updates for acc in self.accumulating)
            if not updates:
                missing = f"no optimizer update after {self.accumulate} micro-batches"
                return (False, missing) if final else None
        if self.target is None:
            return True, "the script's argument sets the batch"
        if not self.changed:
            missing = "no DataLoader with the training batch size was built"
            return (False, missing) if final else None
        return True, self.changed[0]


class _Accumulation:
    """One optimizer stepping once per `k` of the script's step() calls."""

    def __init__(self, optimizer: torch.optim.Optimizer, k: int) -> None:
        self.k, self.calls, self.updates = k, 0, 0
        step, zero_grad = optimizer.step, optimizer.zero_grad
        acc = self

        def accumulated_step(*args: Any, **kwargs: Any) -> Any:
            if args or kwargs.get("closure") is not None:  # LBFGS-style: evaluate every time
                return step(*args, **kwargs)
            acc.calls += 1
            if acc.calls % acc.k:
                return None
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for param in group["params"]:
                        if param.grad is not None:
                            param.grad.div_(acc.k)
            acc.updates += 1
            return step(*args, **kwargs)

        def accumulated_zero_grad(*args: Any, **kwargs: Any) -> None:
            if not acc.between:
                zero_grad(*args, **kwargs)

        optimizer.step = accumulated_step  # type: ignore[method-assign]
        optimizer.zero_grad = accumulated_zero_grad  # type: ignore[method-assign]

    @property
    def between(self) -> bool:
        """Inside an accumulation: the gradients must be kept."""
        return self.calls % self.k != 0


APPLIERS: tuple[type[Applier], ...] = (BatchSize,)
