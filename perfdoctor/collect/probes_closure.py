"""Closures passed to `optimizer.step(closure)`, timed apart from the optimizer's update.

LBFGS and PyTorch Lightning's automatic optimization (and any optimizer used as
`opt.step(closure)`) run the script's forward, backward and everything around them
(`training_step`, hooks, logging, `zero_grad`) inside the optimizer step. The optimizer
step pre-hook may replace the step's arguments: it hands the optimizer a wrapper that calls
the script's closure unchanged and tells the step tracker how long it ran, and the tracker
takes that time out of the optimizer phase (probes_steps.py).
"""

from __future__ import annotations

import functools
from typing import Any, Protocol


class ClosureClock(Protocol):
    def closure_start(self) -> float: ...

    def closure_end(self, t0: float) -> None: ...


def _timed(tracker: ClosureClock, closure: Any) -> Any:
    def timed_closure(*args: Any, **kwargs: Any) -> Any:
        t0 = tracker.closure_start()
        try:
            return closure(*args, **kwargs)
        finally:
            tracker.closure_end(t0)

    # A callable object (Lightning's Closure) has no __name__ to copy: wrap what there is.
    functools.update_wrapper(timed_closure, closure, updated=())
    timed_closure._perfdoctor_closure = closure  # type: ignore[attr-defined]
    return timed_closure


def timed_closure(tracker: ClosureClock, closure: Any) -> Any:
    """The closure, reporting how long each of its calls ran."""
    return _timed(tracker, closure)
