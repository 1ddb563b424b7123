"""Optimizer appliers: fused kernels, and zero_grad(set_to_none=True).

Fused: the constructors of the exact classes Adam/AdamW/SGD/Adagrad are patched (the class
attribute, so `from torch.optim import AdamW` aliases are covered; subclasses, bitsandbytes,
apex are left alone) to add fused=True only when the script chose no implementation itself
(none of fused/foreach/differentiable/capturable; `foreach=False` alone, the single-tensor
loop the finding names, is overridden: fused=True runs beside it) and every parameter is
floating point on a device with fused kernels. Numerics were identical to 5 decimals
(mechanics §3.f).

Fused switches between steps (in-process A/B), per optimizer it fused: every param group's
`fused` (and the optimizer's defaults, for groups added later) goes between True and the
constructor's default for `fused`, which is the script's own since it chose no
implementation; `_step_supports_amp_scaling` goes with it (set by the fused constructor: a
GradScaler then hands the scale to the optimizer instead of unscaling, which the non-fused
step rejects).
The one state that differs between the implementations is Adam/AdamW/Adagrad's
state['step']: fused keeps it as a float32 tensor on the parameter's device, the others
(not capturable) as a CPU scalar, which on CUDA they would read with one sync per
parameter. The switch moves it to the form the implementation expects (the count is exact
in either); SGD keeps only momentum buffers, the same in both. So toggling is safe for the
four classes fused at all; an optimizer whose groups carry an implementation choice of the
script is never fused, so there is nothing to switch.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from typing import Any

import torch

from perfdoctor.collect.appliers.base import Applier, ApplyContext, one_line

log = logging.getLogger(__name__)

FUSED_CLASSES = ("Adam", "AdamW", "SGD", "Adagrad")
_USER_CHOICES = ("fused", "foreach", "differentiable", "capturable")
_AMP_SCALING = "_step_supports_amp_scaling"
# The one implementation choice the applier overrides (torch allows fused=True beside it, and
# switched off the optimizer is the script's single-tensor one again).
SINGLE_TENSOR_CHOICE = "foreach=False"


def _fused_devices() -> tuple[str, ...]:
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        return tuple(_get_fused_kernels_supported_devices())
    except ImportError:
        return ("cuda",)


def _materialize(params: Any) -> list[Any]:
    """The params argument as a list (a generator can be read only once); param-group dicts
    get their own list too."""
    items = list(params)
    out: list[Any] = []
    for item in items:
        if isinstance(item, dict) and "params" in item:
            group = dict(item)
            value = group["params"]
            group["params"] = [value] if isinstance(value, torch.Tensor) else list(value)
            out.append(group)
        else:
            out.append(item)
    return out


def _tensors(params: list[Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for item in params:
        if isinstance(item, dict):
            found.extend(p for p in item["params"] if isinstance(p, torch.Tensor))
        elif isinstance(item, tuple) and len(item) == 2:  # named parameters
            found.append(item[1])
        elif isinstance(item, torch.Tensor):
            found.append(item)
    return found


def _chosen(arguments: dict[str, Any]) -> list[str]:
    """The implementation choices among a constructor's arguments or a param group's keys."""
    return [
        f"{k}={arguments[k]}"
        for k in _USER_CHOICES
        if arguments.get(k) not in (None, False)
        or (k in ("fused", "foreach") and arguments.get(k) is False)
    ]


def _unfused_step_dtype() -> torch.dtype:
    # What a non-fused, non-capturable optimizer creates (torch.optim.optimizer's
    # _get_scalar_dtype): float64 only under a float64 default dtype.
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _move_steps(optimizer: Any, fused: bool) -> None:
    """state['step'] in the form the implementation about to run expects."""
    for group in optimizer.param_groups:
        if group.get("capturable"):
            continue  # capturable keeps it on the device either way
        for param in group["params"]:
            state = optimizer.state.get(param)
            step = state.get("step") if state else None
            if not isinstance(step, torch.Tensor):
                continue
            device, dtype = (
                (param.device, torch.float32)
                if fused
                else (torch.device("cpu"), _unfused_step_dtype())
            )
            if step.device != device or step.dtype != dtype:
                state["step"] = step.to(device=device, dtype=dtype)


def fused_refusal(cls_name: str, tensors: list[torch.Tensor]) -> str | None:
    if not tensors:
        return "no parameters"
    not_float = [t for t in tensors if not t.is_floating_point()]
    if not_float:
        return f"{len(not_float)} parameters are not floating point"
    devices = {t.device.type for t in tensors}
    unsupported = devices - set(_fused_devices())
    if unsupported:
        return f"no fused {cls_name} kernels for {', '.join(sorted(unsupported))}"
    return None


class FusedOptimizer(Applier):
    id = "fused-optimizer"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.fused: weakref.WeakSet[Any] = weakref.WeakSet()
        # The constructor's own default for `fused`, per optimizer: what switching off restores.
        self.unfused: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self.active = True
        self.patched: list[str] = []
        for name in FUSED_CLASSES:
            cls = getattr(torch.optim, name, None)
            if cls is None:
                continue
            signature = inspect.signature(cls.__init__)
            if "fused" not in signature.parameters:
                continue
            ctx.patcher.patch(cls, "__init__", self._make_init(cls, cls.__init__, signature))
            self.patched.append(name)
        if not self.patched:
            self.refuse("this torch has no fused optimizer implementations")
            return
        self.detail = "no Adam/AdamW/SGD/Adagrad was built without an implementation choice"

    def _make_init(self, cls: type, original: Any, signature: inspect.Signature) -> Any:
        applier = self

        def init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            if type(optimizer) is not cls:  # a subclass: its own __init__ knows best
                original(optimizer, *args, **kwargs)
                return
            try:
                bound = signature.bind(optimizer, *args, **kwargs)
            except TypeError:
                original(optimizer, *args, **kwargs)
                return
            chosen = _chosen(bound.arguments)
            # foreach=False alone is the single-tensor loop the finding is about (a leftover
            # more often than a choice): replaced, as cpu-threads replaces a thread count.
            replaced = chosen == [SINGLE_TENSOR_CHOICE]
            if chosen and not replaced:
                applier.note(f"{cls.__name__}: kept the script's {', '.join(chosen)}")
                original(optimizer, *args, **kwargs)
                return
            params = _materialize(bound.arguments["params"])
            bound.arguments["params"] = params
            group_chosen = [c for g in params if isinstance(g, dict) for c in _chosen(g)]
            if group_chosen:
                applier.note(
                    f"{cls.__name__}: kept the script's param-group {', '.join(group_chosen)}"
                )
                original(*bound.args, **bound.kwargs)
                return
            reason = fused_refusal(cls.__name__, _tensors(params))
            if reason is not None:
                applier.note(f"{cls.__name__}: not fused: {reason}")
                original(*bound.args, **bound.kwargs)
                return
            bound.arguments["fused"] = True
            try:
                original(*bound.args, **bound.kwargs)
            except (RuntimeError, ValueError, TypeError) as exc:
                applier.note(f"{cls.__name__}: fused refused by torch: {one_line(exc, 100)}")
                del bound.arguments["fused"]
                original(*bound.args, **bound.kwargs)
                return
            applier.fused.add(optimizer)
            applier.unfused[optimizer] = signature.parameters["fused"].default
            if not applier.active:  # switched off before the script built it
                applier._set_fused(optimizer, False)
            change = f"{cls.__name__}(fused=True)" + (
                f" in place of the script's {SINGLE_TENSOR_CHOICE}" if replaced else ""
            )
            if applier.applied:
                applier.note(change)
            else:
                applier.mark_applied(change)

        return init

    def _set_fused(self, optimizer: Any, on: bool) -> None:
        value = True if on else self.unfused.get(optimizer)
        _move_steps(optimizer, fused=on)
        optimizer.defaults["fused"] = value
        for group in optimizer.param_groups:
            group["fused"] = value
        if on:
            setattr(optimizer, _AMP_SCALING, True)
        else:
            vars(optimizer).pop(_AMP_SCALING, None)

    def switch(self, on: bool) -> None:
        self.active = on
        for optimizer in list(self.fused):
            self._set_fused(optimizer, on)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        optimizers = list(self.fused)
        if not optimizers:
            return (False, "the fused optimizer no longer exists") if final else None
        fused = sum(bool(o.param_groups[0].get("fused")) for o in optimizers)
        return fused == len(
            optimizers
        ), f"param_groups[0]['fused'] True on {fused}/{len(optimizers)}"


class ZeroGradSetToNone(Applier):
    """zero_grad() defaults to set_to_none=True since torch 2.0, so a finding means the script
    passes set_to_none=False: the applier turns that into True."""

    id = "zero-grad-set-to-none"

    def install(self, ctx: ApplyContext) -> None:
        self.calls = 0
        self.overridden = 0
        self.cleared = 0
        self.not_cleared = 0
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            ctx.patcher.patch(owner, "zero_grad", self._make(owner.zero_grad))
        self.mark_applied("zero_grad(set_to_none=False) -> set_to_none=True")

    def _make(self, original: Any) -> Any:
        applier = self

        def zero_grad(obj: Any, set_to_none: bool = True) -> None:
            applier.calls += 1
            if not set_to_none:
                applier.overridden += 1
            original(obj, set_to_none=True)
            if applier.cleared + applier.not_cleared < 3:  # a few checks are enough
                grads = (
                    [p.grad for g in obj.param_groups for p in g["params"]]
                    if isinstance(obj, torch.optim.Optimizer)
                    else [p.grad for p in obj.parameters()]
                )
                if all(g is None for g in grads):
                    applier.cleared += 1
                else:
                    applier.not_cleared += 1

        return zero_grad

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if self.calls == 0:
            return (False, "zero_grad was never called") if final else None
        return self.not_cleared == 0 and self.cleared > 0, (
            f"{self.calls} zero_grad calls, {self.overridden} asked set_to_none=False; "
            f"grads None after {self.cleared}/{self.cleared + self.not_cleared} checked calls"
        )


APPLIERS: tuple[type[Applier], ...] = (FusedOptimizer, ZeroGradSetToNone)
