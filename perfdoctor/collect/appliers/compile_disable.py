"""Lift the script's own `torch.compiler.disable` (and `torch._dynamo.disable`): measure what
tracing the disabled helper into the compiled graph buys, on the unmodified script.

The price of a `disable` graph break read from one run (the eager time between the compiled
graphs) is an upper bound: with the break removed the helper's ops still run, compiled.
What removing it buys is only known by running both, so this applier makes the choice
switchable between steps (in-process A/B, collect/ab_switch.py):

* at install, before the script runs, `torch._dynamo.disable` is replaced (torch.compiler.
  disable calls it at call time). A function defined in the user's files comes back as a
  `LiftedOrDisabled` wrapper that calls the function itself while lifted, and the function
  as torch's own disable wraps it while not. Functions of libraries (torch's included) go to
  torch's disable untouched;
* the wrapper reads one flag on a module-level object. Dynamo inlines the wrapper and
  guards on that flag, so each state gets its own cached graphs: switching costs one
  recompile per frame the first time (the A/B's first block of each arm), then a guard check.
  Lifted, dynamo traces the helper into the graph as if the decorator were not there.

Switched off, the script gets exactly torch's disable back (the same wrapper torch builds).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.appliers.base import Applier, ApplyContext, is_compiling

log = logging.getLogger(__name__)


class _LiftState:
    """One flag dynamo guards on (`G[...]._STATE.lifted == True`): a plain bool attribute,
    so the guard is a constant match and both states stay cached."""

    def __init__(self) -> None:
        self.lifted = True
        self.traced_lifted = False  # set while dynamo traces a lifted call (a store)


_STATE = _LiftState()


def where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "?")
    if code is None:
        return str(name)
    return f"{name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def lifted_or_disabled(fn: Callable[..., Any], disabled: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` itself while the state is lifted, `disabled` (torch's wrapper of it) while not."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _STATE.lifted:
            if is_compiling():
                _STATE.traced_lifted = True
            return fn(*args, **kwargs)
        return disabled(*args, **kwargs)

    call._perfdoctor_disabled = disabled  # type: ignore[attr-defined]
    return call


class LiftCompilerDisable(Applier):
    id = "compile-lift-disable"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        import torch._dynamo  # the script that disables a function imports it anyway

        self.lifted: list[str] = []
        self.user_code = UserCode()
        original = torch._dynamo.disable
        _STATE.lifted = True
        _STATE.traced_lifted = False

        def disable(
            fn: Callable[..., Any] | None = None,
            recursive: bool = True,
            *,
            reason: str | None = None,
            **kwargs: Any,
        ) -> Any:
            if fn is None:  # @torch.compiler.disable(recursive=False, reason=...)
                return lambda f: disable(f, recursive, reason=reason, **kwargs)
            disabled = original(fn, recursive, reason=reason, **kwargs)
            if not self._users(fn):
                return disabled
            self.lifted.append(where(fn))
            return lifted_or_disabled(fn, disabled)

        ctx.patcher.patch(torch._dynamo, "disable", disable)
        self.mark_applied(
            "torch.compiler.disable / torch._dynamo.disable lifted for the script's functions"
        )

    def _users(self, fn: Any) -> bool:
        code = getattr(fn, "__code__", None)  # plain functions and methods; not modules
        return code is not None and self.user_code.is_user_file(code.co_filename)

    def switch(self, on: bool) -> None:
        _STATE.lifted = on

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if not self.lifted:
            if not final:
                return None
            self.refuse("the script disables none of its own functions for torch.compile")
            return None
        names = ", ".join(self.lifted[:3]) + (" ..." if len(self.lifted) > 3 else "")
        if not _STATE.traced_lifted:
            if not final:
                return None
            return False, f"lifted {names}, but dynamo never traced one of them"
        return True, f"dynamo traced the lifted {names} into the graph"


APPLIERS: tuple[type[Applier], ...] = (LiftCompilerDisable,)
