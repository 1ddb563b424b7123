"""What every runtime applier shares: the result it reports, the patches it must undo, and the
moments of the run it can act at.

In-process A/B (optimize/inprocess.py, collect/ab_switch.py): an applier whose fix can be
turned on and off between steps sets `switchable = True` and implements `switch(on)`. One
child run then carries the baseline arm and the variant arm(s); the controller calls
`switch()` at step boundaries only, never inside a step. The contract:

* after `install()` the fix is on, as in a run that applies it for good;
* `switch(False)` gives the script back exactly its own behaviour (the settings it chose,
  its own calls passed through); `switch(True)` takes effect from the next step on;
* `switch()` may come before the fix could take effect (before the roots are known): the
  applier keeps the latest state and honours it when it acts;
* `verify()` is asked while the fix is on (the controller runs it in the on-blocks), so it
  checks the effect on what the script really uses, as in a re-run;
* switching must be cheap next to a step (a flag, a pointer swap): its first cost after a
  switch (a compile, cuDNN's autotuning) is what the settling steps are for.

An applier runs in the child. `install()` is called before the user's script starts, so
constructors (DataLoader, optimizers, DDP) can be patched; model transforms wait for
`on_roots_known` (the first optimizer step), so they take effect from iteration 2. Each
applier proves it took effect with `verify()`, called at the start of step VERIFY_STEP and
again at the end of the run; a refusal is a result too (applied False, a one-line reason).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch

log = logging.getLogger(__name__)

# Iteration 1 runs unmodified (roots are known only at its optimizer step), iteration 2 is the
# first transformed one; checking at the start of step 2 sees iteration 2 completed.
VERIFY_STEP = 2
_PERFDOCTOR_PACKAGE = "perfdoctor"


class RuntimeLike(Protocol):
    """The part of collect/runtime.Runtime the appliers use."""

    roots: list[Any]
    optimizers: list[Any]
    dataloaders: list[Any]

    def on_roots_known(self, fn: Callable[[list[Any], list[Any]], None]) -> None: ...

    def on_step_start(self, fn: Callable[[int], None]) -> None: ...

    def on_finalize(self, fn: Callable[[], None]) -> None: ...


def cuda_available() -> bool:
    """Indirection so tests can exercise CUDA-only flag appliers on a CPU machine."""
    return torch.cuda.is_available()


def usable_cores() -> int:
    """The cores this process may run on; in a multi-rank run (a torchrun rank, as under
    --nproc-per-node) its share of them, as the ranks on this machine split them evenly."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS / Windows
        cores = os.cpu_count() or 1
    if os.environ.get("LOCAL_WORLD_SIZE") is not None:  # a torchrun rank (collect/torchrun.py)
        try:
            local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        except ValueError:
            local_ranks = 1
        cores = max(1, cores // max(1, local_ranks))
    return cores


def is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return bool(compiler.is_compiling())
    return bool(torch._dynamo.is_compiling())


def called_from_perfdoctor(depth: int = 2) -> bool:
    """True when the code that called (`depth` frames up, past torch's own frames) is
    perfdoctor's, not the script's. Torch frames are skipped because torch calls its own
    public API internally (torch.profiler.profile builds a torch.autograd.profiler.profile)."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != "torch" and not name.startswith("torch."):
            return name == _PERFDOCTOR_PACKAGE or name.startswith(_PERFDOCTOR_PACKAGE + ".")
        frame = frame.f_back
    return False


def called_from_library(depth: int = 2) -> bool:
    """True when the direct caller (`depth` frames up) is torch itself or perfdoctor: torch
    calls its own public API internally (torch.profiler.profile builds an autograd profiler),
    and perfdoctor opens its own profiler window; only the script's calls are its choices."""
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return any(name == p or name.startswith(p + ".") for p in ("torch", _PERFDOCTOR_PACKAGE))


def one_line(text: object, limit: int = 200) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class NotSwitchable(RuntimeError):
    """switch() asked of an applier whose fix cannot be turned on and off between steps: a
    caller's error (optimize/switchable.py lists the ids that switch), not a missing part."""


class Patcher:
    """Replaces attributes and puts the originals back, newest first.

    The child process ends after the script, but in-process tests (and a script that runs
    twice in one interpreter) need every patch undone."""

    _MISSING = object()

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []
        self._handles: list[Any] = []

    def patch(self, owner: Any, name: str, replacement: Any) -> Any:
        """Set owner.name = replacement; returns the value it replaces."""
        own = owner.__dict__ if isinstance(owner, type) else vars(owner)
        previous = own.get(name, self._MISSING)
        original = getattr(owner, name)
        self._undo.append((owner, name, previous))
        setattr(owner, name, replacement)
        return original

    def mark(self) -> tuple[int, int]:
        return len(self._undo), len(self._handles)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Undo what was patched since `mark` (an applier whose install failed halfway)."""
        undo, handles = mark
        for handle in reversed(self._handles[handles:]):
            handle.remove()
        del self._handles[handles:]
        for owner, name, previous in reversed(self._undo[undo:]):
            if previous is self._MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)
        del self._undo[undo:]

    def keep(self, handle: Any) -> Any:
        """A hook handle (anything with .remove()) to remove on restore."""
        self._handles.append(handle)
        return handle

    def restore(self) -> None:
        self.rollback((0, 0))


# ApplyContext.shared keys of a coupled arm (DataLoader workers and the threads the cores
# leave beside them, switched together in one process): dataloader-workers publishes how
# many twin workers feed the steps now (a callable, None while its twin is off), and
# cpu-threads a callable that sets its thread count again after such a switch.
TWIN_WORKERS_KEY = "dataloader_twin_workers"
THREADS_RETARGET_KEY = "cpu_threads_retarget"


class ApplyContext:
    """What an applier gets at install time: the runtime, a patcher, and shared state
    (several appliers patch the same constructor through one shared patch)."""

    def __init__(self, runtime: RuntimeLike, patcher: Patcher) -> None:
        self.runtime = runtime
        self.patcher = patcher
        self.shared: dict[str, Any] = {}
        self.install_pid = os.getpid()

    def when_roots_known(
        self, applier: Applier, fn: Callable[[list[Any], list[Any]], None]
    ) -> None:
        """Run fn(roots, optimizers) at the first optimizer step; an exception turns into a
        refusal of `applier` instead of a runtime warning with no owner."""

        def call(roots: list[Any], optimizers: list[Any]) -> None:
            try:
                fn(roots, optimizers)
            except Exception as exc:
                log.warning("%s failed at the first step", applier.id, exc_info=True)
                applier.refuse(f"failed at the first step: {type(exc).__name__}: {exc}")

        self.runtime.on_roots_known(call)


class Applier:
    """One optimization id. Subclasses set `id` and implement install/verify."""

    id: ClassVar[str]
    needs_roots: ClassVar[bool] = False  # acts on the root models: nothing happens without
    # Can be switched on and off between steps (see the module docstring): measured in one
    # process against the baseline instead of by separate re-runs.
    switchable: ClassVar[bool] = False

    def __init__(self) -> None:
        self.applied: bool | None = None  # None: not decided yet
        self.verified: bool | None = None
        self.detail = ""
        self.notes: list[str] = []
        self.evidence = ""  # what the latest check saw
        self._failed_evidence = False

    # ------------------------------------------------------------------ lifecycle

    def install(self, ctx: ApplyContext) -> None:
        """Before the script: patch constructors or register callbacks."""

    def verify(self, final: bool) -> tuple[bool, str] | None:
        """Did it take effect? (ok, one-line evidence); None: nothing to say at this point."""
        return None

    def switch(self, on: bool) -> None:
        """Between steps: the fix on, or the script's own behaviour back (switchable only:
        the A/B controller never switches an applier whose `switchable` is False)."""
        raise NotSwitchable(f"{self.id} cannot be switched between steps")

    # ------------------------------------------------------------------ outcomes

    def refuse(self, reason: str) -> None:
        self.applied = False
        self.verified = False
        self.detail = one_line(reason)

    def mark_applied(self, detail: str) -> None:
        self.applied = True
        self.detail = one_line(detail)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(one_line(text, 120))

    def run_verify(self, final: bool) -> None:
        if self.applied is not True:
            return
        try:
            outcome = self.verify(final)
        except Exception as exc:  # a check must never take the user's run down
            log.warning("verifying %s failed", self.id, exc_info=True)
            outcome = (False, f"check raised {type(exc).__name__}: {one_line(exc, 120)}")
        if outcome is None:
            return
        ok, evidence = outcome
        # Once a check failed it stays failed: a later pass cannot undo a missed effect.
        self.verified = ok if self.verified is None else (self.verified and ok)
        # Keep the evidence of a failed check: it says why, a later pass would not.
        if evidence and not self._failed_evidence:
            self.evidence = one_line(evidence, 160)
            self._failed_evidence = not ok

    def result(self) -> dict[str, Any]:
        if self.applied is None:
            applied, verified = False, False
            detail = self.detail or (
                "the root model was never identified (no optimizer step was seen)"
                if self.needs_roots
                else "never triggered"
            )
        else:
            applied, verified = self.applied, bool(self.verified) and self.applied
            detail = self.detail
            if self.applied and self.verified is None:
                detail = f"{detail}; not verified: the run ended before the check"
        parts = [detail, *[n for n in self.notes if n != detail], self.evidence]
        return {
            "id": self.id,
            "applied": applied,
            "verified": verified,
            "detail": one_line("; ".join(p for p in parts if p), 300),
        }
