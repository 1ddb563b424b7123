"""CommWatch.step_ms: the union of collective intervals inside a step, carried across steps."""

from __future__ import annotations

from perfdoctor.collect.comm_watch import CommWatch


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


DDP_CHECK = """
import json, sys, time
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from perfdoctor.collect.comm_watch import CommWatch

watch = CommWatch(torch)
watch.install(lambda: False)
store = dist.HashStore()
dist.init_process_group("gloo", rank=0, world_size=1, store=store)
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
out["info"] = watch.info()
dist.destroy_process_group()
print(json.dumps(out))
"""


def test_ddp_buckets_and_collectives_are_timed_in_a_real_process_group() -> None:
    """DDP's default all-reduce and a script's own hook are timed; a built-in (C++) hook
    is kept as registered and untimed; a dist.all_reduce call is timed."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", DDP_CHECK], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["default"] > 0 and out["user"] > 0 and out["all_reduce"] > 0
    assert out["builtin"] == 0.0
    assert out["info"] == {"timed": True, "ddp_models": 3, "untimed_ddp_hooks": 1}
