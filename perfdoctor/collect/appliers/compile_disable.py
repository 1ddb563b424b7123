"""Lift the script's own `torch.compiler.disable` (and `torch._dynamo.disable`): measure what
tracing the disabled helper into the compiled graph buys, on the unmodified script.

The price of a `disable` graph break read from one run (the eager time between the compiled
graphs) is an upper bound: with the break removed the helper's ops still run, compiled.
What removing it buys is only known by running both. At install, before the script runs,
`torch._dynamo.disable` is replaced (torch.compiler.disable calls it at call time): a
function defined in the user's files comes back as a copy of itself (the same code,
globals and closure: dynamo traces it exactly as the original), as if the user had
written `smooth = _smooth` for `smooth = torch.compiler.disable(_smooth)`. Functions of
libraries (torch's included) go to torch's disable untouched.

Not switchable between steps: measured by re-runs. A switch cannot keep both versions
cached. The frame compiled while disabled breaks at the call of the helper, and dynamo
installs no guard on a callable it breaks at (nor on anything read inside an inlined
function that breaks), so that frame's cache entry also matches once the helper is lifted:
the lifted arm would run the helper as a graph of its own behind the same break, not fused
into its caller (measured: 9 ops compiled alone instead of 11 in one graph,
tests/unit/collect/test_lift_disable.py). Evicting the frames' caches at each switch would
recompile at every block.
"""

from __future__ import annotations

import functools
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.appliers.base import Applier, ApplyContext

log = logging.getLogger(__name__)


def where(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "?")
    if code is None:
        return str(name)
    return f"{name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def traceable_copy(fn: Any) -> Any:
    """A new function object with `fn`'s code, globals, defaults and closure: dynamo traces it
    as it traces `fn`, and its identity tells the script's names of it apart from `fn`'s own
    (`smooth = torch.compiler.disable(_smooth)`: `smooth` is lifted, `_smooth` untouched)."""
    if isinstance(fn, types.MethodType):
        return types.MethodType(traceable_copy(fn.__func__), fn.__self__)
    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    functools.update_wrapper(copy, fn)
    del copy.__wrapped__  # type: ignore[attr-defined]  # not a wrapper: dynamo sees the function
    return copy


class LiftCompilerDisable(Applier):
    id = "compile-lift-disable"

    def install(self, ctx: ApplyContext) -> None:
        import torch._dynamo  # the script that disables a function imports it anyway

        self.lifted: list[str] = []
        self.copies: dict[int, Any] = {}  # id -> the lifted copies handed to the script
        self.user_code = UserCode()
        original = torch._dynamo.disable

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
            try:
                copy = traceable_copy(fn)
            except (AttributeError, TypeError):  # a callable that is not a plain function
                return disabled
            self.lifted.append(where(fn))
            self.copies[id(copy)] = copy
            return copy

        ctx.patcher.patch(torch._dynamo, "disable", disable)
        self.mark_applied(
            "torch.compiler.disable / torch._dynamo.disable lifted for the script's functions"
        )

    def _users(self, fn: Any) -> bool:
        code = getattr(fn, "__code__", None)  # plain functions and methods; not modules
        return code is not None and self.user_code.is_user_file(code.co_filename)

    def _bindings(self) -> Iterator[tuple[Any, str, Any]]:
        """(namespace, name, value) of every global of the script's modules, and every
        attribute of the classes they define: where the script keeps its helpers."""
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not isinstance(path, str) or not self.user_code.is_user_file(path):
                continue
            names = vars(module)
            for name, value in list(names.items()):
                yield names, name, value
                if isinstance(value, type) and value.__module__ == module.__name__:
                    for attr, member in list(vars(value).items()):
                        yield value, attr, getattr(member, "__func__", member)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if not self.lifted:
            if not final:
                return None
            self.refuse("the script disables none of its own functions for torch.compile")
            return None
        names = ", ".join(self.lifted[:3]) + (" ..." if len(self.lifted) > 3 else "")
        bound = {
            (id(space), name)  # a module can sit in sys.modules under several names
            for space, name, value in self._bindings()
            if self.copies.get(id(value)) is value
        }
        if not bound:
            return False, f"lifted {names}, but no name of the script holds the lifted helper"
        return True, f"lifted {names}: {len(bound)} name(s) of the script call it traced"


APPLIERS: tuple[type[Applier], ...] = (LiftCompilerDisable,)
