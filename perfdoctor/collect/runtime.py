"""The child's runtime: what the probes found, and the hooks appliers plug into.

One `Runtime` exists per child process. The bootstrap creates it before the user's script
runs, hands it to `perfdoctor.collect.appliers.install(ids, runtime)` and to the probes, and
writes `runtime.observations` to observations.json when the run ends.

API for appliers (perfdoctor/collect/appliers.py):

``runtime.spec``
    The `RunSpec` of this child (read-only).
``runtime.observations``
    Mutable dict written to observations.json at the end (docs/run-directory.md). Appliers may
    add keys of their own; `runtime.warn(message)` appends to ``observations["warnings"]``.
``runtime.roots`` / ``runtime.optimizers``
    The root modules whose parameters the optimizers train, and every torch.optim optimizer
    the script constructed. Empty until known (see `on_roots_known`).
``runtime.dataloaders``
    Every `torch.utils.data.DataLoader` the script constructed, in construction order.
``runtime.current_step`` / ``runtime.current_phase``
    Index (0-based) and plan phase ("warmup", "timed", "profiler_warmup", "profiled") of the
    step in progress; -1 and None before the first step.
``runtime.on_roots_known(fn)``
    ``fn(roots, optimizers)`` is called once, at the first optimizer step (before the next
    forward), so a transform takes effect from the second iteration on. Scripts without an
    optimizer get the call when perfdoctor falls back to backward calls or time windows (with
    an empty optimizer list). Registered after roots are known: called immediately.
``runtime.on_step_start(fn)``
    ``fn(index)`` is called at the start of every step (iteration), index 0-based.
``runtime.on_finalize(fn)``
    ``fn()`` is called once when the run ends (completed, crashed or stopped), before
    observations.json is written.

A callback that raises `Exception` does not take the user's script down: the error is
logged and recorded in ``observations["warnings"]``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer

    from perfdoctor.model import RunSpec

log = logging.getLogger(__name__)

RootsCallback = Callable[[list["Module"], list["Optimizer"]], None]
StepCallback = Callable[[int], None]
FinalizeCallback = Callable[[], None]


class Runtime:
    """Shared state of one instrumented child run (see the module docstring for the API)."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.observations: dict[str, Any] = {}
        self.roots: list[Module] = []
        self.optimizers: list[Optimizer] = []
        self.dataloaders: list[Any] = []
        self.current_step = -1
        self.current_phase: str | None = None
        self._roots_known = False
        self._finalized = False
        self._roots_callbacks: list[RootsCallback] = []
        self._step_callbacks: list[StepCallback] = []
        self._finalize_callbacks: list[FinalizeCallback] = []

    # ------------------------------------------------------------------ for appliers

    @property
    def roots_known(self) -> bool:
        return self._roots_known

    def on_roots_known(self, fn: RootsCallback) -> None:
        if self._roots_known:
            self._call_safely(fn, self.roots, self.optimizers)
        else:
            self._roots_callbacks.append(fn)

    def on_step_start(self, fn: StepCallback) -> None:
        self._step_callbacks.append(fn)

    def on_finalize(self, fn: FinalizeCallback) -> None:
        self._finalize_callbacks.append(fn)

    def warn(self, message: str) -> None:
        """Record a one-line warning for the report (deduplicated)."""
        warnings = self.observations.setdefault("warnings", [])
        if message not in warnings:
            warnings.append(message)
        log.info("%s", message)

    # ------------------------------------------------------------------ for the probes

    def publish_roots(self, roots: list[Module], optimizers: list[Optimizer]) -> None:
        """Called by the probes once the roots are known; fires `on_roots_known` callbacks."""
        if self._roots_known:
            return
        self.roots[:] = roots
        self.optimizers[:] = optimizers
        self._roots_known = True
        callbacks, self._roots_callbacks = self._roots_callbacks, []
        for fn in callbacks:
            self._call_safely(fn, self.roots, self.optimizers)

    def publish_step_start(self, index: int, phase: str) -> None:
        self.current_step = index
        self.current_phase = phase
        for fn in self._step_callbacks:
            self._call_safely(fn, index)

    def publish_finalize(self) -> None:
        if self._finalized:
            return
        self._finalized = True
        for fn in self._finalize_callbacks:
            self._call_safely(fn)

    def _call_safely(self, fn: Callable[..., None], *args: Any) -> None:
        # An applier bug must not change what the user's script does; the report shows it.
        try:
            fn(*args)
        except Exception as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            log.debug("runtime callback %s failed", name, exc_info=True)
            self.warn(f"perfdoctor callback {name} failed: {type(exc).__name__}: {exc}")
