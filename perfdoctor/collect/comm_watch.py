"""Time each training process spends in torch.distributed collectives, per step.

This is what a rank's `comm_ms` in steps.jsonl is: the union, within the step, of the
intervals in which this process had a collective in flight. Two sources:

- the collective functions of `torch.distributed` (all_reduce, broadcast, barrier, ...),
  called by the script or a library: the call's duration (a synchronous call returns when the
  collective is done; an `async_op=True` call until its future completes, where it has one);
- DistributedDataParallel's gradient all-reduce, which runs in C++ during backward: a DDP
  model gets torch's own default all-reduce hook (`ddp_comm_hooks.default_hooks.allreduce_hook`,
  the same arithmetic as DDP's built-in path) wrapped with a timer, from each bucket's launch
  to its future's completion. A script that registers its own Python hook keeps it, timed;
  one that registers a built-in (C++) hook keeps it untimed.

On CPU (gloo) these intervals are the transfer and the wait for the peers. On CUDA (NCCL) a
collective returns once it is queued, so they are the host's part only; the GPU side is in
the profiler trace (comm kernels). Every hook steps aside while Dynamo traces.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from perfdoctor.collect.thread_state import keep_this_threads_state

log = logging.getLogger(__name__)

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "gather",
    "scatter",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
_WRAPPED = "__perfdoctor_comm__"


class CommWatch:
    def __init__(self, torch: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.torch = torch
        self._clock = clock
        # Closed (start, end) intervals; appended from gloo's threads too (list.append is
        # atomic under the GIL), taken at each step's end.
        self._intervals: list[tuple[float, float]] = []
        self.seen = False  # a collective or a DDP bucket was timed in this process
        self.ddp_models = 0
        self.untimed_ddp_hooks = 0

    # ------------------------------------------------------------------ per step

    def step_ms(self, start: float, end: float) -> float | None:
        """Milliseconds of [start, end] with a collective in flight; None before any was seen
        (a process without a process group records no communication)."""
        if not self.seen:
            return None
        taken, self._intervals = self._intervals, []
        later = [(a, b) for a, b in taken if b > end]
        self._intervals.extend(later)  # overlaps the next step too
        clipped = sorted((max(a, start), min(b, end)) for a, b in taken if b > start and a < end)
        total, reach = 0.0, start
        for a, b in clipped:
            if b <= reach:
                continue
            total += b - max(a, reach)
            reach = b
        return round(total * 1000.0, 4)

    def _add(self, start: float) -> None:
        self._intervals.append((start, self._clock()))
        self.seen = True

    # ------------------------------------------------------------------ install

    def install(self, is_compiling: Callable[[], bool]) -> None:
        torch = self.torch
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is None or getattr(original, _WRAPPED, False):
                continue
            setattr(dist, name, self._timed_call(original, is_compiling))
        try:
            from torch.nn.parallel import DistributedDataParallel
        except ImportError:
            return
        self._install_ddp(DistributedDataParallel, is_compiling)

    def _timed_call(self, original: Callable[..., Any], is_compiling: Any) -> Callable[..., Any]:
        watch = self

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            if is_compiling():
                return original(*args, **kwargs)
            t0 = watch._clock()
            result = original(*args, **kwargs)
            if kwargs.get("async_op") and result is not None:
                watch._when_done(result, t0)
            else:
                watch._add(t0)
            return result

        setattr(collective, _WRAPPED, True)
        return collective

    def _when_done(self, work: Any, t0: float) -> None:
        def done(_fut: Any) -> None:
            keep_this_threads_state()  # run on a gloo thread: see collect/thread_state.py
            self._add(t0)

        try:
            work.get_future().add_done_callback(done)
        except Exception:  # a Work without a future (some backends): the launch only
            self._add(t0)

    def _install_ddp(self, ddp: Any, is_compiling: Any) -> None:
        if getattr(ddp.__init__, _WRAPPED, False):
            return
        watch = self
        base_init = ddp.__init__
        base_register = ddp.register_comm_hook
        base_builtin = ddp._register_builtin_comm_hook

        @functools.wraps(base_init)
        def ddp_init(model: Any, *args: Any, **kwargs: Any) -> None:
            base_init(model, *args, **kwargs)
            try:
                model.__perfdoctor_hooked__ = False
                watch.ddp_models += 1
                handle: list[Any] = []

                def first_forward(module: Any, _inputs: Any) -> None:
                    if is_compiling() or not handle:
                        return  # Dynamo traces it: leave hooks alone, wait for an eager call
                    handle.pop().remove()  # one shot: after the script's own hook, if any
                    if not module.__perfdoctor_hooked__:
                        watch._default_hook(module, base_register)

                handle.append(model.register_forward_pre_hook(first_forward))
            except Exception:
                log.debug("DDP communication not timed", exc_info=True)

        @functools.wraps(base_register)
        def register_comm_hook(model: Any, state: Any, hook: Callable[..., Any]) -> None:
            model.__perfdoctor_hooked__ = True
            base_register(model, state, watch._timed_hook(hook))

        @functools.wraps(base_builtin)
        def register_builtin(model: Any, comm_hook_type: Any) -> None:
            model.__perfdoctor_hooked__ = True
            watch.untimed_ddp_hooks += 1
            base_builtin(model, comm_hook_type)

        setattr(ddp_init, _WRAPPED, True)
        ddp.__init__ = ddp_init
        ddp.register_comm_hook = register_comm_hook
        ddp._register_builtin_comm_hook = register_builtin

    def _default_hook(self, model: Any, base_register: Callable[..., Any]) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        model.__perfdoctor_hooked__ = True
        try:
            base_register(model, None, self._timed_hook(default_hooks.allreduce_hook))
        except Exception:
            log.debug("DDP communication not timed", exc_info=True)

    def _timed_hook(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        @functools.wraps(hook)
        def timed(state: Any, bucket: Any) -> Any:
            t0 = watch._clock()
            future = hook(state, bucket)

            def record_then_pass_on(done: Any) -> Any:
                keep_this_threads_state()  # run on a gloo thread: see collect/thread_state.py
                try:
                    return done.value()
                finally:
                    watch._add(t0)

            try:
                # A chained future, not a done-callback: DDP waits on what the hook returns,
                # so the timer (Python, run on a gloo thread) is over before backward returns.
                # A done-callback would run after the waiter is released, into the next step.
                # The gloo thread's Python state is kept alive by the timer's first call
                # (collect/thread_state.py): torch's profiler with Python stacks crashes on
                # one freed between its start and its stop.
                return future.then(record_then_pass_on)
            except Exception:
                watch._add(t0)
                return future

        return timed

    def info(self) -> dict[str, Any]:
        return {
            "timed": self.seen,
            "ddp_models": self.ddp_models,
            "untimed_ddp_hooks": self.untimed_ddp_hooks,
        }
