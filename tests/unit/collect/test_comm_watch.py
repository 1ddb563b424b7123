"""CommWatch.step_ms: the union of collective intervals inside a step, carried across steps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from load_limits import scaled

from perfdoctor.collect.comm_watch import COLLECTIVES, CommWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed(watch: CommWatch, clock: Clock, start: float, end: float) -> None:
    clock.now = start
    t0 = clock()
    clock.now = end
    watch._add(t0)


def test_nothing_timed_is_not_measured_then_overlaps_count_once() -> None:
    clock = Clock()
    watch = CommWatch(torch=None, clock=clock)
    assert watch.step_ms(0.0, 1.0) is None  # no collective yet: no process group
    timed(watch, clock, 0.1, 0.3)
    timed(watch, clock, 0.2, 0.4)  # overlaps the first: 0.1..0.4
    timed(watch, clock, 0.5, 0.6)
    assert watch.step_ms(0.0, 1.0) == 400.0
    assert watch.step_ms(1.0, 2.0) == 0.0  # a step without collectives


def test_an_interval_across_the_step_end_counts_in_both_steps() -> None:
    clock = Clock()
    watch = CommWatch(torch=None, clock=clock)
    timed(watch, clock, 0.9, 1.2)
    assert watch.step_ms(0.0, 1.0) == 100.0
    assert watch.step_ms(1.0, 2.0) == 200.0


@pytest.fixture
def torch_put_back() -> Iterator[Any]:
    """torch with CommWatch's wrappers taken off again afterwards: the check runs in this
    process (torch is imported here already by the other collect tests; a child would import
    it again), and the tests after it must meet torch.distributed as torch made it."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    collectives = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    ddp_names = ("__init__", "register_comm_hook", "_register_builtin_comm_hook")
    ddp_own = {name: vars(DistributedDataParallel)[name] for name in ddp_names}
    try:
        yield torch
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for name, original in collectives.items():
            setattr(dist, name, original)
        for name, original in ddp_own.items():
            setattr(DistributedDataParallel, name, original)


def test_ddp_buckets_and_collectives_are_timed_in_a_real_process_group(torch_put_back: Any) -> None:
    """DDP's default all-reduce and a script's own hook are timed; a built-in (C++) hook
    is kept as registered and untimed; a dist.all_reduce call is timed."""
    torch = torch_put_back
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    watch = CommWatch(torch)
    watch.install(lambda: False)
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    out = {}
    for mode in ("default", "user", "builtin"):
        model = DDP(nn.Linear(4, 4))
        if mode == "user":
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        if mode == "builtin":
            model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
        watch.step_ms(0.0, time.perf_counter())  # forget what came before
        t0 = time.perf_counter()
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
        out[mode] = watch.step_ms(t0, time.perf_counter())
    t0 = time.perf_counter()
    dist.all_reduce(torch.ones(1))
    out["all_reduce"] = watch.step_ms(t0, time.perf_counter())
    assert out["default"] > 0 and out["user"] > 0 and out["all_reduce"] > 0
    assert out["builtin"] == 0.0
    assert watch.info() == {"timed": True, "ddp_models": 3, "untimed_ddp_hooks": 1}


def test_the_future_ddp_waits_on_completes_only_after_the_timer_ran() -> None:
    """The timed hook's future is done only once its interval is recorded: DDP's wait for it
    must not release the script while perfdoctor's Python still runs on the thread that
    completed the all-reduce (a gloo thread, where a profiler starting meanwhile crashed)."""
    import threading

    import torch

    in_timer, let_go = threading.Event(), threading.Event()
    calls = []

    def clock() -> float:
        calls.append(None)
        if len(calls) == 2:  # the completion's reading, taken on the completing thread
            in_timer.set()
            let_go.wait(timeout=scaled(30))
        return float(len(calls))

    watch = CommWatch(torch, clock=clock)
    inner: Any = torch.futures.Future()
    returned = watch._timed_hook(lambda _state, _bucket: inner)(None, None)
    completer = threading.Thread(target=inner.set_result, args=(torch.ones(2),))
    completer.start()
    try:
        assert in_timer.wait(timeout=scaled(30))
        assert not returned.done()  # the timer is still running: no waiter may go on yet
    finally:
        let_go.set()
        completer.join(timeout=scaled(30))
    assert torch.equal(returned.wait(), torch.ones(2))
    assert watch._intervals == [(1.0, 2.0)]
