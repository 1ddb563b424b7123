"""By-hand changes and their titles written for the script in hand, so that advice works as
written (issue 24): a DDP script's gradient accumulation skips the all-reduce of the
micro-batches (`model.no_sync()`), an optimizer without fused kernels is told foreach=True
under a title that says foreach, intra-op threads are a number, not an expression over names
the script does not have. Pure: facts in, text out; tests/unit/optimize/test_snippets.py
executes each snippet against a tiny model.
"""

from __future__ import annotations

from collections.abc import Callable

from perfdoctor.model import Facts
from perfdoctor.optimize.policies import _FOREACH_ONLY_CLASSES, _FUSED_CLASSES
from perfdoctor.optimize.sizing import cpu_threads_target
from perfdoctor.rules.cpu import FEWER_WORKERS_TARGET, _compute_cores

TitleHook = Callable[[Facts, str], str]

CPU_FP32 = (
    "# this CPU has no native bf16/fp16 matmuls: autocast emulates them, slower than fp32\n"
    "with torch.autocast(device_type='cpu', dtype=torch.bfloat16, enabled=False):\n"
    "    loss = loss_fn(model(x), y)"
)
ACCUM_STEPS = 4  # a placeholder the user tunes; the snippet defines it so that it runs


def _optimizer_class(facts: Facts) -> str | None:
    cls = facts.get("optimizer_class")
    return cls if isinstance(cls, str) and cls else None


def fused_optimizer_title(facts: Facts, title: str) -> str:
    """The title follows what the snippet does: foreach=True for a class without fused
    kernels (fused_for_script_optimizer writes that snippet)."""
    cls = _optimizer_class(facts)
    if cls in _FOREACH_ONLY_CLASSES:
        return f"Multi-tensor optimizer step (foreach=True; {cls} has no fused kernel)"
    if cls in _FUSED_CLASSES:
        return f"Fused optimizer kernels ({cls}, fused=True)"
    return title


def grad_accumulation_for_script(facts: Facts, code_change: str) -> str:
    """Micro-batches between optimizer steps, written for the script: under DDP each
    backward all-reduces unless it runs in `model.no_sync()`, so only the last micro-batch of
    an update may synchronise; a script with a GradScaler scales the loss and steps through it."""
    ddp = facts.get("uses_ddp") is True
    scaler = facts.get("grad_scaler_used") is True
    backward = (
        "scaler.scale(loss_fn(model(x), y) / accum).backward()"
        if scaler
        else "(loss_fn(model(x), y) / accum).backward()"
    )
    step = "scaler.step(opt); scaler.update()" if scaler else "opt.step()"
    lines = [f"accum = {ACCUM_STEPS}  # micro-batches per optimizer step"]
    if ddp:
        lines = [
            "import contextlib",
            *lines,
            "for i, (x, y) in enumerate(loader):",
            "    last = (i + 1) % accum == 0",
            "    # DDP all-reduces in every backward outside no_sync(): sync the last one only",
            "    with contextlib.nullcontext() if last else model.no_sync():",
            f"        {backward}",
            "    if last:",
            f"        {step}; opt.zero_grad(set_to_none=True)",
        ]
    else:
        lines += [
            "for i, (x, y) in enumerate(loader):",
            f"    {backward}",
            "    if (i + 1) % accum == 0:",
            f"        {step}; opt.zero_grad(set_to_none=True)",
        ]
    return "\n".join(lines)


def cpu_threads_for_script(facts: Facts, code_change: str) -> str:
    """The thread count the applier sets, as a number: the catalog's expression names a
    `num_workers` the script may not have."""
    target = cpu_threads_target(facts)
    if target is None:
        return code_change
    workers = facts.get("dataloader_num_workers")
    why = (
        f"  # usable cores less {workers} DataLoader worker(s)"
        if isinstance(workers, int) and workers > 0
        else "  # the usable cores"
    )
    return f"torch.set_num_threads({target}){why}"


def dataloader_workers_for_script(facts: Facts, code_change: str) -> str:
    """Where the script's own num_workers leaves the training process no core
    (dataloader-workers-exceed-cores), the change is fewer workers, by number, with the
    threads that fit beside them: the catalog's text sizes workers up for a loader that
    waits, which is not what that finding asks for."""
    workers = facts.get("dataloader_num_workers")
    if not isinstance(workers, int) or workers <= 0 or not facts.get("cpu_cores_logical"):
        return code_change
    usable, _, _ = _compute_cores(facts)
    room = usable - 1  # one core kept for the training process (rules/cpu.py)
    if workers <= room:
        return code_change
    fits = FEWER_WORKERS_TARGET  # what the applier lowers it to (optimize/sizing.py)
    if fits == 0:
        return (
            f"DataLoader(ds, batch_size=..., num_workers=0)  # was {workers} on {usable} "
            "usable core(s): in-process loading, no hand-off from workers"
        )
    return (
        f"DataLoader(ds, batch_size=..., num_workers={fits})  # was {workers}: "
        f"{usable} usable core(s), one kept for the training process\n"
        f"torch.set_num_threads({max(1, usable - fits)})"
    )


def batched_indexing_for_script(facts: Facts, code_change: str) -> str:
    """A BatchSampler over the script's own sampler and batch size, at the line that builds
    its DataLoader: the in-memory dataset gets a list of indices and returns a whole batch."""
    batch = facts.get("dataloader_batch_size")
    if not isinstance(batch, int) or batch <= 0:
        return code_change
    sampler = facts.get("dataloader_sampler_class")
    inner = "SequentialSampler" if sampler == "SequentialSampler" else "RandomSampler"
    built = facts.locations.get("dataloader_construct", ())
    at = (
        f"# at {built[0].file}:{built[0].line}, where the DataLoader is built "
        f"(was batch_size={batch}{', shuffle=True' if inner == 'RandomSampler' else ''}):\n"
        if built
        else ""
    )
    return (
        f"{at}from torch.utils.data import BatchSampler, DataLoader, {inner}\n"
        f"batches = BatchSampler({inner}(ds), batch_size={batch}, drop_last=False)\n"
        "loader = DataLoader(ds, sampler=batches, batch_size=None)  # ds[list] -> a batch"
    )


# The title hooks, by optimization id (recommend.py asks here; the catalog keeps its titles).
TITLES: dict[str, TitleHook] = {"fused-optimizer": fused_optimizer_title}


def title_for(opt_id: str, title: str, facts: Facts) -> str:
    hook = TITLES.get(opt_id)
    return hook(facts, title) if hook is not None else title
