"""Every by-hand snippet does what it says, in the context of the script (issue 24 item 4).

Each family is built for representative script contexts (DDP or not, GradScaler or not, the
optimizer class, the machine's cores) through recommend.py, as a report would show it, and
then executed against a tiny model: gradient accumulation really skips DDP's all-reduce on
the micro-batches (a gloo group of one process counts them), the optimizer accepts the
keyword its title names, the thread count is set, fp32 really runs in fp32.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from perfdoctor.model import Facts, Finding, Scalar
from perfdoctor.optimize.policies import _FOREACH_ONLY_CLASSES, _FUSED_CLASSES
from perfdoctor.optimize.recommend import recommend

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

BATCHES = 8
ACCUM = 4  # the snippet's own placeholder (snippets.ACCUM_STEPS)


def _facts(**values: Scalar) -> Facts:
    return Facts(values={"device_is_cuda": False, "cpu_cores_logical": 2, **values})


def _rec(opt_id: str, facts: Facts) -> Any:
    finding = Finding(
        rule_id="test",
        severity="warning",
        title="t",
        explanation="e",
        evidence=(),
        optimizations=(opt_id,),
    )
    (rec,) = recommend([finding], facts)
    return rec


def _run(code: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    scope = {"torch": torch, **namespace}
    exec(compile(code.replace("lr=...", "lr=0.01"), "<snippet>", "exec"), scope)
    return scope


def _loader() -> list[tuple[Any, Any]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, generator=gen), torch.randn(4, 1, generator=gen)) for _ in range(8)]


class _CountingSGD(torch.optim.SGD):  # type: ignore[misc,name-defined]
    def __init__(self, params: Any) -> None:
        super().__init__(params, lr=0.01)
        self.steps = 0

    def step(self, closure: Any = None) -> Any:
        self.steps += 1
        return super().step(closure)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def gloo_group() -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def _ddp_with_allreduce_counter() -> tuple[Any, list[int]]:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
    calls: list[int] = []

    def count(state: object, bucket: Any) -> Any:
        calls.append(1)
        return (
            dist.all_reduce(bucket.buffer(), async_op=True)
            .get_future()
            .then(lambda fut: fut.value()[0])
        )

    # DDP checks the hook's annotations as objects (this module's are strings).
    count.__annotations__ = {
        "state": object,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    model.register_comm_hook(None, count)
    return model, calls


# --------------------------------------------------------------------------- grad accumulation


def test_grad_accumulation_without_ddp_steps_once_per_accum() -> None:
    code = _rec("grad-accumulation", _facts(uses_ddp=False)).code_change
    model = torch.nn.Linear(3, 1)
    opt = _CountingSGD(model.parameters())
    _run(code, {"model": model, "opt": opt, "loader": _loader(), "loss_fn": torch.nn.MSELoss()})
    assert "no_sync" not in code
    assert opt.steps == BATCHES // ACCUM


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_accumulation_for_ddp_all_reduces_once_per_optimizer_step(
    gloo_group: None, compiled: bool
) -> None:
    facts = _facts(uses_ddp=True, model_compiled=compiled)
    code = _rec("grad-accumulation", facts).code_change
    assert "model.no_sync()" in code
    ddp, allreduces = _ddp_with_allreduce_counter()
    # torch.compile(DDP(m)) as scripts write it: no_sync reaches DDP through the wrapper
    # (the eager backend keeps the test quick; the attribute path is the same).
    model = torch.compile(ddp, backend="eager") if compiled else ddp
    opt = _CountingSGD(model.parameters())
    _run(code, {"model": model, "opt": opt, "loader": _loader(), "loss_fn": torch.nn.MSELoss()})
    assert opt.steps == BATCHES // ACCUM
    # One bucket (a tiny model): one all-reduce per optimizer step, none per micro-batch.
    assert len(allreduces) == BATCHES // ACCUM


def test_the_plain_snippet_under_ddp_would_all_reduce_every_micro_batch(gloo_group: None) -> None:
    """The counter can tell the difference: without no_sync every backward all-reduces."""
    code = _rec("grad-accumulation", _facts(uses_ddp=False)).code_change
    model, allreduces = _ddp_with_allreduce_counter()
    opt = _CountingSGD(model.parameters())
    _run(code, {"model": model, "opt": opt, "loader": _loader(), "loss_fn": torch.nn.MSELoss()})
    assert len(allreduces) == BATCHES


@pytest.mark.parametrize("ddp", [False, True])
def test_grad_accumulation_with_a_grad_scaler_steps_through_it(ddp: bool, request: Any) -> None:
    if ddp:
        request.getfixturevalue("gloo_group")
    code = _rec("grad-accumulation", _facts(uses_ddp=ddp, grad_scaler_used=True)).code_change
    assert "scaler.scale(" in code and "scaler.step(opt)" in code
    inner = torch.nn.Linear(3, 1)
    model = torch.nn.parallel.DistributedDataParallel(inner) if ddp else inner
    opt = _CountingSGD(model.parameters())
    scaler = torch.amp.GradScaler("cpu")
    before = inner.weight.detach().clone()
    _run(
        code,
        {
            "model": model,
            "opt": opt,
            "loader": _loader(),
            "loss_fn": torch.nn.MSELoss(),
            "scaler": scaler,
        },
    )
    assert opt.steps == BATCHES // ACCUM
    assert not torch.equal(before, inner.weight)


# --------------------------------------------------------------------------- optimizer


@pytest.mark.parametrize("cls", sorted(_FUSED_CLASSES | _FOREACH_ONLY_CLASSES))
def test_optimizer_snippet_runs_and_its_title_names_what_it_does(cls: str) -> None:
    rec = _rec("fused-optimizer", _facts(optimizer_class=cls))
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    scope = _run(f"opt = {rec.code_change}", {"model": model})
    opt = scope["opt"]
    assert type(opt).__name__ == cls
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    group = opt.param_groups[0]
    if cls in _FUSED_CLASSES:
        assert group["fused"] is True
        assert "fused=True" in rec.title and "foreach" not in rec.title
    else:
        assert group["foreach"] is True
        assert "fused" not in rec.code_change.split("#")[0]
        assert "foreach=True" in rec.title and "Fused optimizer kernels" not in rec.title


def test_every_foreach_only_class_really_lacks_fused() -> None:
    """The split the titles rely on holds for the installed torch (fused= in the signature)."""
    import inspect

    for cls in _FOREACH_ONLY_CLASSES:
        assert "fused" not in inspect.signature(getattr(torch.optim, cls)).parameters, cls
    for cls in _FUSED_CLASSES:
        assert "fused" in inspect.signature(getattr(torch.optim, cls)).parameters, cls


# --------------------------------------------------------------------------- CPU


@pytest.mark.parametrize("workers", [0, 1])
def test_cpu_threads_snippet_sets_the_budgeted_count(workers: int) -> None:
    facts = _facts(cpu_cores_logical=4, dataloader_num_workers=workers, torch_num_threads=1)
    code = _rec("cpu-threads", facts).code_change
    before = torch.get_num_threads()
    try:
        _run(code, {})
        assert torch.get_num_threads() == 4 - workers
    finally:
        torch.set_num_threads(before)


def test_cpu_fp32_snippet_runs_the_forward_in_fp32() -> None:
    code = _rec("cpu-fp32", _facts(autocast_used=True, autocast_dtype="bfloat16")).code_change
    model = torch.nn.Linear(3, 1)
    seen: list[Any] = []
    model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    # Inside the script's own bf16 region, as the snippet would sit in the script.
    _run(
        "with torch.autocast(device_type='cpu', dtype=torch.bfloat16):\n" + _indent(code),
        {"model": model, "x": torch.randn(2, 3), "y": torch.randn(2, 1), "loss_fn": _mse},
    )
    assert seen == [torch.float32]


def _mse(a: Any, b: Any) -> Any:
    return torch.nn.functional.mse_loss(a, b)


def _indent(code: str) -> str:
    return "".join(f"    {line}\n" for line in code.splitlines())


# --------------------------------------------------------------------------- DataLoader


class _Dataset(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        return torch.tensor([float(i)])


def test_too_many_workers_snippet_lowers_them_to_what_fits() -> None:
    """4 workers on 2 cores (minGPT's and makemore's default): the snippet loads in the
    training process (num_workers=0, what the applier lowers it to and what measured fastest
    on those scripts), leaves the threads alone, and the DataLoader it builds runs."""
    facts = _facts(cpu_cores_logical=2, dataloader_num_workers=4, torch_num_threads=2)
    code = _rec("dataloader-workers", facts).code_change
    before = torch.get_num_threads()
    try:
        scope = _run(
            f"loader = {code}".replace("batch_size=...", "batch_size=4"),
            {"DataLoader": torch.utils.data.DataLoader, "ds": _Dataset()},
        )
        loader = scope["loader"]
        assert loader.num_workers == 0 and torch.get_num_threads() == before
        assert "was 4" in code and "set_num_threads" not in code
        assert [b.shape[0] for b in loader] == [4, 4]
    finally:
        torch.set_num_threads(before)


def test_a_loader_without_workers_keeps_the_sizing_text() -> None:
    facts = _facts(dataloader_num_workers=0)
    from perfdoctor.optimize.catalog import CATALOG

    assert (
        _rec("dataloader-workers", facts).code_change == CATALOG["dataloader-workers"].code_change
    )
