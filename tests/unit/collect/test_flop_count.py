"""collect/flop_count.py in-process: which step is counted, what is skipped and why."""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator

import pytest
import torch

from perfdoctor.collect.flop_count import StepFlopCounter


@pytest.fixture(autouse=True)
def nothing_compiled_in_this_process() -> Iterator[None]:
    """The counter stands aside once dynamo has compiled anything in the process. Another
    module's test on the same xdist worker may have compiled (tests/unit/collect/
    test_lift_disable.py does): these tests start from dynamo's counters as a fresh process
    has them, and leave them as they found them."""
    if "torch._dynamo" not in sys.modules:
        yield
        return
    from torch._dynamo.utils import counters

    saved = copy.deepcopy(counters)
    counters.clear()
    yield
    counters.clear()
    counters.update(saved)


def run_steps(counter: StepFlopCounter, steps: int) -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 16)
    for index in range(steps):
        counter.step_started(index)
        torch.mm(a, b)
        counter.step_closed(index, 0.01)


def test_only_the_last_warm_up_step_is_counted() -> None:
    counter = StepFlopCounter(torch, warmup_steps=3)
    run_steps(counter, 6)
    assert counter.info["step"] == 2
    assert counter.info["flops_per_step"] == 2 * 4 * 8 * 16  # one mm, not six
    assert counter.info["by_op"] == {"aten.mm": 2 * 4 * 8 * 16}
    assert counter.info["previous_step_ms"] == 10.0


def test_the_first_step_is_never_counted() -> None:
    counter = StepFlopCounter(torch, warmup_steps=1)
    run_steps(counter, 3)
    assert "flops_per_step" not in counter.info and "2 warm-up" in counter.info["skipped"]


def test_a_compiled_script_is_skipped_with_the_reason() -> None:
    from torch._dynamo.utils import counters

    counters["stats"]["unique_graphs"] += 1
    try:
        counter = StepFlopCounter(torch, warmup_steps=2)
        run_steps(counter, 3)
    finally:
        counters["stats"]["unique_graphs"] -= 1
    assert "flops_per_step" not in counter.info
    assert "torch.compile" in counter.info["skipped"]


def test_a_step_that_never_closes_leaves_no_mode_behind() -> None:
    counter = StepFlopCounter(torch, warmup_steps=2)
    counter.step_started(0)
    counter.step_closed(0, 0.01)
    counter.step_started(1)
    counter.stop("the script ended")
    assert "did not finish" in counter.info["skipped"]
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None


def test_turned_off() -> None:
    counter = StepFlopCounter(torch, warmup_steps=3, enabled=False)
    run_steps(counter, 4)
    assert "PERFDOCTOR_FLOP_COUNT=0" in counter.info["skipped"]


def test_an_in_process_ab_run_skips_the_count_with_the_reason() -> None:
    from perfdoctor.collect.flop_count import FLOPS_SKIPPED_IN_AB

    counter = StepFlopCounter(torch, warmup_steps=3, skipped=FLOPS_SKIPPED_IN_AB)
    run_steps(counter, 4)
    assert counter.info["skipped"] == FLOPS_SKIPPED_IN_AB
    assert counter.mode is None and "flops_total" not in counter.info
