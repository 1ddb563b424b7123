"""The compile-lift-disable applier (collect/appliers/compile_disable.py): the script's own
torch.compiler.disable'd functions come back switchable, traced into the graph while on and
disabled (a graph break) while off; torch's and libraries' disables are left alone.

Compiled with dynamo's counting backend (no inductor): what matters is how many graphs
dynamo makes and how many ops they hold, not the generated code."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


class _Runtime:
    def __init__(self) -> None:
        self.roots: list[Any] = []
        self.optimizers: list[Any] = []
        self.dataloaders: list[Any] = []

    def on_roots_known(self, fn: Any) -> None: ...
    def on_step_start(self, fn: Any) -> None: ...
    def on_finalize(self, fn: Any) -> None: ...


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
    applier.install(ApplyContext(_Runtime(), patcher))
    try:
        yield applier
    finally:
        patcher.restore()
        torch._dynamo.reset()
    assert torch._dynamo.disable is original


def _compiled(helper: Any) -> tuple[Any, Any]:
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()

    def forward(x: Any) -> Any:
        return helper(x + 1).relu()

    return torch.compile(forward, backend=counter), counter


def test_lifted_the_helper_is_traced_into_one_graph_off_it_breaks_it(lift) -> None:
    helper = torch.compiler.disable(_helper)
    assert lift.lifted == [f"_helper (test_lift_disable.py:{_helper.__code__.co_firstlineno})"]
    fn, counter = _compiled(helper)
    x = torch.randn(4)
    fn(x)
    assert (counter.frame_count, counter.op_count) == (1, 1 + 3 * 3 + 1)  # one graph, all ops
    lift.switch(False)
    fn(x)
    # torch's own disable again: the graph ends before the helper, which runs eagerly
    assert counter.frame_count > 1 and counter.op_count < 2 * 11
    frames = counter.frame_count
    lift.switch(True)
    fn(x)
    lift.switch(False)
    fn(x)
    # each state stays cached: switching back and forth recompiles nothing more than once
    lift.switch(True)
    fn(x)
    lift.switch(False)
    fn(x)
    assert counter.frame_count <= frames + 1
    assert torch.equal(helper(x), _helper(x))  # eager, either way
    lift.run_verify(final=True)
    assert lift.result()["verified"] is True, lift.result()


def test_the_decorator_forms_and_torch_dynamo_disable_are_lifted(lift) -> None:
    @torch.compiler.disable(recursive=False)
    def nonrecursive(h: Any) -> Any:
        return h * 2

    @torch._dynamo.disable
    def plain(h: Any) -> Any:
        return h * 3

    assert len(lift.lifted) == 2
    assert hasattr(nonrecursive, "_perfdoctor_disabled") and hasattr(plain, "_perfdoctor_disabled")
    fn, counter = _compiled(plain)
    fn(torch.ones(2))
    assert counter.frame_count == 1


def test_library_functions_keep_torchs_disable(lift) -> None:
    from torch.nn import functional

    wrapped = torch.compiler.disable(functional.gelu)
    assert not hasattr(wrapped, "_perfdoctor_disabled")
    assert getattr(wrapped, "_torchdynamo_disable", False)
    assert lift.lifted == []


def test_a_script_that_disables_nothing_of_its_own_is_refused(lift) -> None:
    lift.run_verify(final=False)
    lift.run_verify(final=True)
    result = lift.result()
    assert result["applied"] is False and "disables none" in result["detail"]
