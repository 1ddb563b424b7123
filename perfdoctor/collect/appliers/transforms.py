"""Model transforms on the root models (the modules whose parameters the optimizers train):
channels_last, torch.compile (default and reduce-overhead), activation checkpointing.

They run at the first optimizer step, when the roots are known, so iteration 1 is unmodified
and iteration 2 is the first transformed one. Everything is done in place: Parameter objects
stay the same (the optimizer stays valid) and state_dict keys do not change.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, ClassVar

import torch
from torch import nn

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import (
    Applier,
    ApplyContext,
    is_compiling,
    one_line,
)

log = logging.getLogger(__name__)

_CHANNELS_LAST = torch.channels_last


def _names(roots: list[Any]) -> str:
    return ", ".join(type(r).__name__ for r in roots)


# --------------------------------------------------------------------------- channels_last


def _four_d_params(module: nn.Module) -> list[torch.Tensor]:
    return [p for p in module.parameters() if p.dim() == 4 and p.is_floating_point()]


def _to_channels_last(value: Any) -> tuple[Any, int]:
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 4
        and value.is_floating_point()
        and not value.is_contiguous(memory_format=_CHANNELS_LAST)
    ):
        return value.contiguous(memory_format=_CHANNELS_LAST), 1
    return value, 0


class ChannelsLast(Applier):
    id = "channels-last"
    needs_roots = True

    def install(self, ctx: ApplyContext) -> None:
        self.ctx = ctx
        self.converted_inputs = 0
        self.roots: list[nn.Module] = []
        self._patch_ddp(ctx)
        ctx.when_roots_known(self, self._on_roots_known)

    def _patch_ddp(self, ctx: ApplyContext) -> None:
        """Convert a model before DDP builds its gradient buckets: converting afterwards
        makes grad strides mismatch the bucket views (pytorch#47163)."""
        try:
            from torch.nn.parallel import DistributedDataParallel
        except ImportError:
            return
        original = DistributedDataParallel.__init__

        def init(ddp: Any, module: nn.Module, *args: Any, **kwargs: Any) -> None:
            if isinstance(module, nn.Module) and _four_d_params(module):
                module.to(memory_format=_CHANNELS_LAST)
            original(ddp, module, *args, **kwargs)

        ctx.patcher.patch(DistributedDataParallel, "__init__", init)

    def _on_roots_known(self, roots: list[Any], optimizers: list[Any]) -> None:
        chosen = [r for r in roots if _four_d_params(r)]
        if not chosen:
            self.refuse("no 4-D (convolution) weights in the root model")
            return
        weights = 0
        for root in chosen:
            weights += len(_four_d_params(root))
            root.to(memory_format=_CHANNELS_LAST)
            self.ctx.patcher.keep(
                root.register_forward_pre_hook(self._convert_inputs, with_kwargs=True)
            )
        self.roots = chosen
        self.mark_applied(f"{weights} 4-D weights of {_names(chosen)} and 4-D inputs")

    def _convert_inputs(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        # Under torch.compile the conversion is traced into the graph; only the count (our
        # own Python state, which Dynamo would guard on) is left out.
        compiling = is_compiling()
        changed = 0
        new_args = []
        for value in args:
            value, n = _to_channels_last(value)
            new_args.append(value)
            changed += n
        new_kwargs = {}
        for key, value in kwargs.items():
            new_kwargs[key], n = _to_channels_last(value)
            changed += n
        if not changed:
            return None
        if not compiling:
            self.converted_inputs += changed
        return tuple(new_args), new_kwargs

    def verify(self, final: bool) -> tuple[bool, str] | None:
        params = [p for r in self.roots for p in _four_d_params(r)]
        nhwc = sum(p.is_contiguous(memory_format=_CHANNELS_LAST) for p in params)
        return nhwc == len(params), (
            f"{nhwc}/{len(params)} 4-D weights channels_last; "
            f"{self.converted_inputs} inputs converted"
        )


# --------------------------------------------------------------------------- torch.compile


def _already_compiled(root: nn.Module) -> bool:
    optimized = getattr(torch._dynamo.eval_frame, "OptimizedModule", ())
    if optimized and isinstance(root, optimized):
        return True
    return any(getattr(m, "_compiled_call_impl", None) is not None for m in root.modules())


def _dynamo_counters() -> dict[str, int]:
    counters = torch._dynamo.utils.counters
    return {
        "frames_ok": int(counters["frames"]["ok"]),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]),
    }


class Compile(Applier):
    """Switchable (in-process A/B): nn.Module.__call__ runs `_compiled_call_impl` when the
    module has one, else its eager `_call_impl`; both use the same parameters. Off, the
    compiled callable is put aside (the eager forward runs, as in the script); on, the same
    callable is put back, with its compiled code and guards: no recompile on switching back.
    Compilation is lazy, so a switch that comes before the first call costs nothing."""

    id = "compile"
    needs_roots = True
    switchable = True
    mode: ClassVar[str | None] = None

    def install(self, ctx: ApplyContext) -> None:
        self.ctx = ctx
        self.active = True
        self.compiled: list[tuple[nn.Module, Any]] = []  # (root, its compiled call)
        self.before: dict[str, int] = {}
        if not self.device_ok():
            return
        ctx.when_roots_known(self, self._on_roots_known)

    def device_ok(self) -> bool:
        return True

    def _on_roots_known(self, roots: list[Any], optimizers: list[Any]) -> None:
        todo = [r for r in roots if not _already_compiled(r)]
        if not todo:
            self.refuse("the script already compiles its model")
            return
        self.before = _dynamo_counters()
        options = {"mode": self.mode} if self.mode else {}
        for root in todo:
            if hasattr(root, "compile"):
                root.compile(**options)
            else:  # torch without nn.Module.compile: what it does, by hand
                root._compiled_call_impl = torch.compile(root._call_impl, **options)
            self.compiled.append((root, root._compiled_call_impl))
        self._place()
        mode = f" (mode={self.mode!r})" if self.mode else ""
        self.mark_applied(f"{_names(todo)} compiled in place{mode}")

    def switch(self, on: bool) -> None:
        self.active = on
        self._place()

    def _place(self) -> None:
        for root, compiled in self.compiled:
            root._compiled_call_impl = compiled if self.active else None

    def verify(self, final: bool) -> tuple[bool, str] | None:
        now = _dynamo_counters()
        frames = now["frames_ok"] - self.before.get("frames_ok", 0)
        graphs = now["unique_graphs"] - self.before.get("unique_graphs", 0)
        breaks = now["graph_breaks"] - self.before.get("graph_breaks", 0)
        if frames <= 0:
            if not final:
                return None
            return False, "dynamo compiled no frame of the model"
        return True, f"{frames} frames compiled, {graphs} graphs, {breaks} graph breaks"


class CompileCudagraphs(Compile):
    """Not switchable. CUDA graph trees assume every step of the model runs through them:
    each replay writes its outputs into the graph's private memory pool, reclaimed at the
    next step (cudagraph_mark_step_begin), and the backward graph's outputs become p.grad.
    Eager off-steps in between would keep tensors from that pool alive and in use (grads
    that zero_grad(set_to_none=False) keeps and accumulates into, optimizer state and
    outputs the script keeps), which the next replay overwrites or which force a
    re-recording; and the pool stays reserved through the off-steps, so the baseline arm
    would not have the script's own memory either. A re-run measures it honestly."""

    id = "compile-cudagraphs"
    mode = "reduce-overhead"
    switchable = False

    def switch(self, on: bool) -> None:
        Applier.switch(self, on)  # refuses: see the class docstring

    def device_ok(self) -> bool:
        if not base.cuda_available():
            self.refuse("CUDA graphs need a CUDA device; this run has none")
            return False
        # Outputs of a graph replay are overwritten by the next replay; marking each step
        # lets scripts that keep outputs across iterations (logging) keep working.
        self.ctx.runtime.on_step_start(self._mark_step)
        return True

    def _mark_step(self, step_index: int) -> None:
        if self.applied:
            torch.compiler.cudagraph_mark_step_begin()

    def verify(self, final: bool) -> tuple[bool, str] | None:
        outcome = super().verify(final)
        if outcome is None or not outcome[0]:
            return outcome
        skips = _dynamo_counters()["cudagraph_skips"] - self.before.get("cudagraph_skips", 0)
        if skips:
            return False, f"inductor skipped CUDA graphs {skips} time(s) (see its log)"
        return True, f"{outcome[1]}; no cudagraph skips"


# --------------------------------------------------------------------------- checkpointing


class CheckpointedForward:
    """Instance `forward` of a repeated block: recompute its activations in backward.

    Pickling stores the class's plain forward, so a saved model does not depend on
    perfdoctor."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.original = module.forward
        self.calls = 0
        self.traced = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.original(*args, **kwargs)
        if is_compiling():
            self.traced = True  # a store, not a count: Dynamo would guard on a counter
        else:
            self.calls += 1
        return torch.utils.checkpoint.checkpoint(
            self.original, *args, use_reentrant=False, **kwargs
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # See precision.AutocastForward: the saved model gets the class's plain forward.
        return (getattr, (self.module, "forward"))


def _has_batchnorm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def repeated_blocks(
    root: nn.Module, path: str = ""
) -> tuple[list[tuple[str, list[nn.Module]]], list[str]]:
    """(container path, blocks) for every ModuleList/Sequential holding >= 2 non-leaf blocks of
    one class with parameters; and the containers refused because a block holds BatchNorm.
    Blocks found are not searched further (no nested checkpoints)."""
    found: list[tuple[str, list[nn.Module]]] = []
    refused: list[str] = []
    taken: set[int] = set()
    if isinstance(root, (nn.ModuleList, nn.Sequential)):
        children = list(root.children())
        counts = Counter(type(c) for c in children)
        for cls, count in counts.items():
            blocks = [c for c in children if type(c) is cls]
            if count < 2 or not any(True for _ in blocks[0].children()):
                continue
            if not any(True for _ in blocks[0].parameters()):
                continue
            where = f"{path or type(root).__name__} ({count} x {cls.__name__})"
            if any(_has_batchnorm(b) for b in blocks):
                refused.append(where)
            else:
                found.append((where, blocks))
            taken.update(id(b) for b in blocks)
    for name, child in root.named_children():
        if id(child) in taken:
            continue
        sub_found, sub_refused = repeated_blocks(child, f"{path}.{name}" if path else name)
        found.extend(sub_found)
        refused.extend(sub_refused)
    return found, refused


class ActivationCheckpointing(Applier):
    id = "activation-checkpointing"
    needs_roots = True

    def install(self, ctx: ApplyContext) -> None:
        self.ctx = ctx
        self.wrappers: list[CheckpointedForward] = []
        ctx.when_roots_known(self, self._on_roots_known)

    def _on_roots_known(self, roots: list[Any], optimizers: list[Any]) -> None:
        found: list[tuple[str, list[nn.Module]]] = []
        refused: list[str] = []
        for root in roots:
            root_found, root_refused = repeated_blocks(root, type(root).__name__)
            found.extend(root_found)
            refused.extend(root_refused)
        if not found:
            if refused:
                self.refuse(
                    "BatchNorm inside the repeated blocks (its running stats would update "
                    f"twice per step): {', '.join(refused)}"
                )
            else:
                self.refuse("no repeated blocks (ModuleList/Sequential of one block class)")
            return
        for _where, blocks in found:
            for block in blocks:
                wrapper = CheckpointedForward(block)
                self.ctx.patcher.patch(block, "forward", wrapper)
                self.wrappers.append(wrapper)
        self.mark_applied("checkpointed " + ", ".join(where for where, _ in found))
        if refused:
            self.note("left alone (BatchNorm inside): " + ", ".join(refused))

    def verify(self, final: bool) -> tuple[bool, str] | None:
        calls = sum(w.calls for w in self.wrappers)
        if calls == 0 and any(w.traced for w in self.wrappers):
            return True, "checkpointed blocks traced into the compiled model"
        if calls == 0:
            return (False, "no checkpointed block ran with gradients") if final else None
        return True, one_line(f"{calls} block forwards ran under torch.utils.checkpoint")


APPLIERS: tuple[type[Applier], ...] = (
    ChannelsLast,
    Compile,
    CompileCudagraphs,
    ActivationCheckpointing,
)
