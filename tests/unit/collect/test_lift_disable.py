"""The compile-lift-disable applier (collect/appliers/compile_disable.py): the script's own
torch.compiler.disable'd functions come back as traceable copies, traced into the caller's
graph as if the disable were removed by hand; torch's and libraries' disables are left
alone; and why the lift is measured by re-runs, not switched between steps.

Compiled with dynamo's counting backend (no inductor): what matters is how many graphs
dynamo makes and how many ops they hold, not the generated code."""

from __future__ import annotations

from typing import Any

import pytest

from .fake_runtime import FakeRuntime

torch = pytest.importorskip("torch")


def _helper(h: Any) -> Any:
    for _ in range(3):
        h = h * 0.9 + torch.tanh(h)
    return h


@pytest.fixture
def lift():
    import torch._dynamo

    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.compile_disable import LiftCompilerDisable

    original = torch._dynamo.disable
    torch._dynamo.reset()
    patcher = Patcher()
    applier = LiftCompilerDisable()
    applier.install(ApplyContext(FakeRuntime(), patcher))
    try:
        yield applier
    finally:
        patcher.restore()
        torch._dynamo.reset()
    assert torch._dynamo.disable is original


def _forward(x: Any) -> Any:
    return helper(x + 1).relu()  # the script's name of the disabled helper, looked up here


helper: Any = None


def test_the_lifted_helper_is_traced_into_its_callers_graph(lift) -> None:
    from torch._dynamo.testing import CompileCounter

    global helper
    helper = torch.compiler.disable(_helper)
    assert lift.lifted == [f"_helper (test_lift_disable.py:{_helper.__code__.co_firstlineno})"]
    assert helper is not _helper and torch.equal(helper(torch.ones(2)), _helper(torch.ones(2)))
    counter = CompileCounter()
    torch.compile(_forward, backend=counter)(torch.randn(4))
    # add, the helper's 9 ops, relu: one graph, as with the disable removed by hand
    assert (counter.frame_count, counter.op_count) == (1, 11)
    lift.run_verify(final=True)
    assert lift.result()["verified"] is True, lift.result()
    helper = None


def test_why_the_lift_is_not_switched_between_steps() -> None:
    """The frame compiled while the helper is disabled holds no guard on it (dynamo breaks at
    the call and guards nothing about the callable), so once the name holds the traceable
    helper again, that cache entry still serves: the helper then compiles as a graph of its
    own behind the same break. If this test fails, dynamo now guards it, and the applier
    could switch (collect/appliers/compile_disable.py)."""
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    global helper
    torch._dynamo.reset()
    try:
        helper = torch._dynamo.disable(_helper)
        counter = CompileCounter()
        fn = torch.compile(_forward, backend=counter)
        fn(torch.randn(4))
        assert counter.op_count == 2  # add, then relu after the break
        helper = _helper  # lifted by hand, in the same process
        fn(torch.randn(4))
        assert counter.op_count == 2 + 9  # the helper alone: the disabled frame served
    finally:
        helper = None
        torch._dynamo.reset()


def test_the_decorator_forms_and_torch_dynamo_disable_are_lifted(lift) -> None:
    @torch.compiler.disable(recursive=False)
    def nonrecursive(h: Any) -> Any:
        return h * 2

    @torch._dynamo.disable
    def plain(h: Any) -> Any:
        return h * 3

    assert len(lift.lifted) == 2
    # the lifted copies, not torch's wrappers
    assert not getattr(nonrecursive, "_torchdynamo_disable", False)
    assert not getattr(plain, "_torchdynamo_disable", False)
    assert torch.equal(nonrecursive(torch.ones(2)), torch.full((2,), 2.0))


def test_library_functions_keep_torchs_disable(lift) -> None:
    from torch.nn import functional

    wrapped = torch.compiler.disable(functional.gelu)
    assert getattr(wrapped, "_torchdynamo_disable", False)
    assert lift.lifted == []


def test_a_script_that_disables_nothing_of_its_own_is_refused(lift) -> None:
    lift.run_verify(final=False)
    lift.run_verify(final=True)
    result = lift.result()
    assert result["applied"] is False and "disables none" in result["detail"]
