"""Precision appliers: bf16/fp16 autocast (fp16 with a GradScaler) and TF32.

Autocast wraps each root model's forward, as Accelerate does, so the loss computed outside
the model runs in fp32 (outputs are cast back). fp16 also needs loss scaling: scalar
`torch.autograd.backward` calls are scaled (below Tensor.backward, so a loss probe patched on
Tensor.backward still records the unscaled loss), each optimizer's step becomes
`scaler.step(opt)` with a lazy `scaler.update()`, and gradient clipping unscales first
(mechanics §3.a: without that, clipping saw a grad norm of 2.75e5 instead of 1.85 and
training was crippled).

The autocast appliers switch between steps (in-process A/B). Off, the forward is the
model's own (no autocast, outputs as the model gives them) and fp16's GradScaler is out of
the way entirely: the loss is not scaled, clipping does not unscale, optimizer.step is the
optimizer's own. The scaler's update() still pending from the last on-step runs at the
switch, so the loss scale and its growth tracker stand where the on-steps left them, and
the next on-block continues from there, as if the off-steps had not happened to the scaler;
only on-steps count as scaled or skipped steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any, ClassVar

import torch
import torch.optim.optimizer as optimizer_module

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import (
    Applier,
    ApplyContext,
    called_from_library,
    called_from_perfdoctor,
    is_compiling,
)

log = logging.getLogger(__name__)

_LOW_PRECISION = (torch.float16, torch.bfloat16)
# GradScaler's default initial scale (2**16) overflows on the first steps of most models and
# skips them until the scale has come down: harmless in a long training run, but in a short
# measured run it shifts the loss trajectory by a few steps against the baseline, which the
# numerics guard would read as drift. 2**10 rarely overflows and still lifts gradients far
# above fp16's underflow; the usual growth schedule raises it when there is room.
INIT_SCALE = 2.0**10
_PROBED_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def autocast_enabled(device_type: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4 has no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def to_float32(obj: Any) -> Any:
    """fp16/bf16 tensors in a forward's output -> fp32, through tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return obj.float() if obj.dtype in _LOW_PRECISION else obj
    if isinstance(obj, tuple):
        converted = [to_float32(v) for v in obj]
        return type(obj)(*converted) if hasattr(obj, "_fields") else type(obj)(converted)
    if isinstance(obj, list):
        return [to_float32(v) for v in obj]
    if type(obj) is dict:
        return {k: to_float32(v) for k, v in obj.items()}
    if isinstance(obj, MutableMapping):  # e.g. transformers' ModelOutput: update in place
        for key in list(obj.keys()):
            obj[key] = to_float32(obj[key])
    return obj


class AutocastForward:
    """Instance `forward` of a root model: runs the original under autocast.

    Pickling (torch.save(model), copy.deepcopy) stores the class's plain forward instead, so
    a saved model does not depend on perfdoctor."""

    def __init__(self, module: torch.nn.Module, device_type: str, dtype: torch.dtype) -> None:
        self.module = module
        self.original = module.forward
        self.device_type = device_type
        self.dtype = dtype
        self.calls = 0
        self.user_autocast_calls = 0
        self.traced = False  # traced into a torch.compile graph
        self.active = True  # switched off (in-process A/B): the model's own forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.active:  # a compiled model guards on it: one graph for each position
            return self.original(*args, **kwargs)
        # Under torch.compile this body is traced: counting there would make Dynamo guard on
        # the counters and recompile every call; a plain store is replayed without a guard.
        compiling = is_compiling()
        if autocast_enabled(self.device_type):
            # The script autocasts already (perhaps in another dtype): its choice stands.
            if not compiling:
                self.user_autocast_calls += 1
            return self.original(*args, **kwargs)
        if compiling:
            self.traced = True
        else:
            self.calls += 1
        with torch.autocast(self.device_type, dtype=self.dtype):
            output = self.original(*args, **kwargs)
        return to_float32(output)

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled before the module's state is set, getattr finds the class's forward: the
        # saved model references only builtins, never perfdoctor.
        return (getattr, (self.module, "forward"))


def _root_device_type(root: torch.nn.Module) -> str | None:
    for param in root.parameters():
        return param.device.type
    return None


class _AutocastApplier(Applier):
    needs_roots = True
    switchable = True
    dtype: ClassVar[torch.dtype]

    def install(self, ctx: ApplyContext) -> None:
        self.ctx = ctx
        self.active = True
        self.wrappers: list[AutocastForward] = []
        self.probed_dtypes: list[torch.dtype] = []
        self.user_scalers = 0
        self._watch_user_scalers(ctx)
        ctx.when_roots_known(self, self._on_roots_known)

    def _watch_user_scalers(self, ctx: ApplyContext) -> None:
        """Notice a GradScaler the script builds itself (its loss scaling then stays theirs)."""
        scaler_cls = torch.amp.GradScaler
        original_init = scaler_cls.__init__
        applier = self

        def init(scaler: Any, *args: Any, **kwargs: Any) -> None:
            if not called_from_perfdoctor():
                applier.user_scalers += 1
            original_init(scaler, *args, **kwargs)

        ctx.patcher.patch(scaler_cls, "__init__", init)

    def _on_roots_known(self, roots: list[Any], optimizers: list[Any]) -> None:
        if not roots:
            self.refuse("no root model trains parameters of the optimizer")
            return
        device_type = _root_device_type(roots[0])
        if device_type not in ("cuda", "cpu"):
            self.refuse(f"autocast is not supported for device {device_type!r}")
            return
        reason = self.precondition(device_type, optimizers)
        if reason:
            self.refuse(reason)
            return
        for root in roots:
            wrapper = AutocastForward(root, device_type, self.dtype)
            wrapper.active = self.active
            self.ctx.patcher.patch(root, "forward", wrapper)
            self.wrappers.append(wrapper)
            self._add_probe(root)
        names = ", ".join(type(r).__name__ for r in roots)
        self.mark_applied(f"{names} forward under {self.dtype_name} autocast ({device_type})")
        self.after_wrap(device_type, optimizers)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def precondition(self, device_type: str, optimizers: list[Any]) -> str | None:
        return None

    def after_wrap(self, device_type: str, optimizers: list[Any]) -> None:
        """fp16 adds its GradScaler here."""

    def switch(self, on: bool) -> None:
        self.active = on
        for wrapper in self.wrappers:
            wrapper.active = on

    def _add_probe(self, root: torch.nn.Module) -> None:
        """Record the dtype autocast gives the root's first Linear/Conv, once. A global hook,
        removed after it fired: a hook stored on the module would break torch.save(model)."""
        layer = next((m for m in root.modules() if isinstance(m, _PROBED_LAYERS)), None)
        if layer is None:
            return
        probed = self.probed_dtypes
        handle: Any = None

        def probe(module: Any, _inputs: Any, output: Any) -> None:
            if module is not layer or is_compiling() or probed:
                return
            if isinstance(output, torch.Tensor) and autocast_enabled(output.device.type):
                probed.append(output.dtype)
                handle.remove()

        handle = torch.nn.modules.module.register_module_forward_hook(probe)
        self.ctx.patcher.keep(handle)

    def verify(self, final: bool) -> tuple[bool, str] | None:
        calls = sum(w.calls for w in self.wrappers)
        user_calls = sum(w.user_autocast_calls for w in self.wrappers)
        if calls == 0 and user_calls:
            self.refuse("the script already runs its model under autocast")
            return None
        if calls == 0 and any(w.traced for w in self.wrappers):
            return True, "autocast traced into the compiled model"
        if calls == 0:
            return (
                (False, "the root model was not called again after the change") if final else None
            )
        if self.probed_dtypes:
            seen = self.probed_dtypes[0]
            ok = seen == self.dtype
            return ok, f"first Linear/Conv output is {str(seen).replace('torch.', '')}"
        # No Linear/Conv to probe (or it ran compiled): the wrapper itself is the evidence.
        return True, f"{calls} root forwards ran under autocast"


class AmpBf16(_AutocastApplier):
    id = "amp-bf16"
    dtype = torch.bfloat16

    def precondition(self, device_type: str, optimizers: list[Any]) -> str | None:
        if device_type == "cuda" and not torch.cuda.is_bf16_supported():
            return "this GPU has no native bf16 (compute capability < 8.0): use amp-fp16"
        return None


class ScaledStep:
    """Per-instance optimizer.step: scaler.step(opt); the scaler's update() follows lazily.

    GradScaler.step calls optimizer.step again, which lands here: the inner call runs the
    original step. A step the scaler skips (inf/NaN grads) never reaches the optimizer, so its
    global step hooks do not fire; they are fired here so that a skipped step still counts as
    a training step for perfdoctor's step detection, like any other iteration.

    update() runs once the iteration's steps are done: before the next scaled backward (or
    before the same optimizer steps again). Updating right after each step would be wrong for
    two optimizers whose losses were both scaled before either stepped (GANs)."""

    def __init__(self, optimizer: Any, scaler: Any, applier: AmpFp16) -> None:
        self.optimizer = optimizer
        self.original = optimizer.step
        self.scaler = scaler
        self.applier = applier
        self.inside = False
        self.reached = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.inside:
            self.reached = True
            return self.original(*args, **kwargs)
        if not self.applier.active:  # switched off: the gradients were never scaled
            return self.original(*args, **kwargs)
        if self.optimizer in self.applier.stepped_since_update:
            self.applier.flush_update()
        self.inside, self.reached = True, False
        try:
            result = self.scaler.step(self.optimizer, *args, **kwargs)
        finally:
            self.inside = False
        self.applier.stepped_since_update.append(self.optimizer)
        self.applier.scaled_steps += 1
        if not self.reached:
            self.applier.skipped_steps += 1
            _fire_global_step_hooks(self.optimizer, args, kwargs)
        return result

    def __reduce__(self) -> tuple[Any, ...]:
        return (getattr, (self.optimizer, "step"))


def _fire_global_step_hooks(optimizer: Any, args: Any, kwargs: Any) -> None:
    module = optimizer_module
    for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"):
        for hook in list(getattr(module, name, {}).values()):
            try:
                hook(optimizer, args, kwargs)
            except Exception:  # someone else's hook: never break the step over it
                log.debug("global optimizer hook failed on a skipped step", exc_info=True)


class AmpFp16(_AutocastApplier):
    id = "amp-fp16"
    dtype = torch.float16

    def install(self, ctx: ApplyContext) -> None:
        self.scaler: Any = None
        self.scaled_optimizers: list[Any] = []
        self.scaled_steps = 0
        self.skipped_steps = 0
        self.scaled_backwards = 0
        self.unscaled_for_clip = 0
        self.stepped_since_update: list[Any] = []
        # The class's update as it is now, before perfdoctor's probes wrap it: the probes
        # read GradScaler.update as a step boundary, and this scaler's lazy update() calls
        # happen mid-iteration. Its optimizer steps are the step signal instead.
        self._update = torch.amp.GradScaler.update
        super().install(ctx)

    def flush_update(self) -> None:
        if self.stepped_since_update and self.scaler is not None:
            self._update(self.scaler)
            self.stepped_since_update.clear()

    def switch(self, on: bool) -> None:
        # Between steps the last on-iteration is complete: its update() is due now, before
        # the off-steps (which never touch the scaler) or the next on-block.
        self.flush_update()
        super().switch(on)

    def precondition(self, device_type: str, optimizers: list[Any]) -> str | None:
        if device_type == "cpu" and not hasattr(torch.amp, "GradScaler"):
            return "this torch has no CPU GradScaler"
        if not optimizers:
            return "no optimizer to step through a GradScaler"
        return None

    def after_wrap(self, device_type: str, optimizers: list[Any]) -> None:
        if self.user_scalers:
            self.note("the script builds its own GradScaler: loss scaling left to it")
            return
        self.scaler = torch.amp.GradScaler(device_type, init_scale=INIT_SCALE)
        for optimizer in optimizers:
            self.ctx.patcher.patch(optimizer, "step", ScaledStep(optimizer, self.scaler, self))
            self.scaled_optimizers.append(optimizer)
        self._patch_backward()
        self._patch_clipping()

    def _patch_backward(self) -> None:
        original = torch.autograd.backward
        applier = self

        def backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            if (
                grad_tensors is None
                and isinstance(tensors, torch.Tensor)
                and tensors.numel() == 1
                and tensors.is_floating_point()
                and not is_compiling()
                and torch._C._current_graph_task_id() == -1  # not a nested backward
                and applier.active
                # A compiled model runs the wrapper's body only when traced: still autocast.
                and any(w.calls or w.traced for w in applier.wrappers)
            ):
                applier.scaled_backwards += 1
                applier.flush_update()
                tensors = applier.scaler.scale(tensors)
            return original(tensors, grad_tensors, *args, **kwargs)

        self.ctx.patcher.patch(torch.autograd, "backward", backward)

    def _patch_clipping(self) -> None:
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            original = getattr(torch.nn.utils.clip_grad, name)
            clip = self._unscaling_clip(original)
            self.ctx.patcher.patch(torch.nn.utils.clip_grad, name, clip)
            if getattr(torch.nn.utils, name, None) is original:
                self.ctx.patcher.patch(torch.nn.utils, name, clip)

    def _unscaling_clip(self, original: Callable[..., Any]) -> Callable[..., Any]:
        applier = self

        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(parameters, torch.Tensor):
                parameters = [parameters]
            parameters = list(parameters)
            applier.unscale_owners(parameters)
            return original(parameters, *args, **kwargs)

        return clip

    def unscale_owners(self, parameters: list[torch.Tensor]) -> None:
        """Unscale the grads of every optimizer owning one of `parameters`, once per step."""
        if not self.active:  # switched off: the gradients were never scaled
            return
        wanted = {id(p) for p in parameters}
        for optimizer in self.scaled_optimizers:
            owned = any(id(p) in wanted for g in optimizer.param_groups for p in g["params"])
            if not owned:
                continue
            try:
                self.scaler.unscale_(optimizer)
                self.unscaled_for_clip += 1
            except RuntimeError:
                pass  # already unscaled since the last update(): nothing to do

    def verify(self, final: bool) -> tuple[bool, str] | None:
        outcome = super().verify(final)
        if outcome is None or not outcome[0] or self.scaler is None:
            return outcome
        if self.scaled_steps == 0:
            return (False, "no optimizer step went through the GradScaler") if final else None
        return True, (
            f"{outcome[1]}; GradScaler stepped {self.scaled_steps} times "
            f"({self.skipped_steps} skipped on inf/NaN, still counted), "
            f"{self.unscaled_for_clip} unscale-before-clip"
        )


class Tf32(Applier):
    """TF32 for fp32 matmuls, through the legacy API only (mixing it with the new
    fp32_precision API raises at read time, mechanics §3.c). Set at install, so iteration 1
    already benefits, and again after the script's own setup (first optimizer step), unless
    the script itself asked for a precision (set_float32_matmul_precision, or
    torch.backends.cuda.matmul.allow_tf32 / fp32_precision): that choice stands, and the
    precision goes back to what the script set.

    Switchable (in-process A/B): the script's later calls go through as before and are
    remembered; off, the precision is what the unmodified script would have set by then, on,
    'high' again. Since torch 2.9 the legacy reading raises once the global precision and
    the cuBLAS flag disagree ('high', then allow_tf32 = False), so the script's precision is
    not read back but replayed: its last set_float32_matmul_precision (else the precision at
    start-up), then its allow_tf32 assignment after that, which is all the two legacy calls
    leave behind. A script that uses the new fp32_precision API is not followed: the applier
    refuses, at whatever step, and puts back the script's own settings."""

    id = "tf32"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.active = True
        if not base.cuda_available():
            self.refuse("TF32 is a CUDA tensor-core mode; this run has no CUDA device")
            return
        self.user_choice: str | None = None
        self.startup_precision = torch.get_float32_matmul_precision()
        self.script_precision: str | None = None  # its last set_float32_matmul_precision
        self.script_allow_tf32: bool | None = None  # its allow_tf32 assignment after that
        self.script_new_api: Any = None  # its matmul.fp32_precision, when it used that
        self._set_precision = original = torch.set_float32_matmul_precision
        applier = self

        def set_precision(precision: str) -> None:
            original(precision)
            if not called_from_perfdoctor():
                applier.script_precision, applier.script_allow_tf32 = precision, None
                applier._script_chose(f"float32 matmul precision {precision!r}")

        ctx.patcher.patch(torch, "set_float32_matmul_precision", set_precision)
        self.matmul = torch.backends.cuda.matmul
        self._matmul_setattr = original_setattr = type(self.matmul).__setattr__

        def matmul_setattr(matmul: Any, name: str, value: Any) -> None:
            original_setattr(matmul, name, value)
            if name not in ("allow_tf32", "fp32_precision") or called_from_library():
                return
            if name == "allow_tf32":
                applier.script_allow_tf32 = bool(value)
            else:
                applier.script_new_api = value
            applier._script_chose(f"torch.backends.cuda.matmul.{name} = {value!r}")

        ctx.patcher.patch(type(self.matmul), "__setattr__", matmul_setattr)
        original("high")
        self.mark_applied("float32 matmul precision 'highest' -> 'high' (TF32)")

        def after_setup(roots: list[Any], optimizers: list[Any]) -> None:
            if self.user_choice is not None:
                self._give_back()
                self.refuse(f"the script sets {self.user_choice}")
            elif self.active:
                original("high")

        ctx.when_roots_known(self, after_setup)

    def _script_chose(self, what: str) -> None:
        if self.user_choice is None:
            self.user_choice = what
        if self.script_new_api is not None and self.applied is not False:
            self._give_back()
            self.refuse(f"the script sets {what}: the new precision API is not followed")

    def _give_back(self) -> None:
        """The precision the unmodified script would have now."""
        self._set_precision(self.script_precision or self.startup_precision)
        if self.script_allow_tf32 is not None:
            self._matmul_setattr(self.matmul, "allow_tf32", self.script_allow_tf32)
        if self.script_new_api is not None:
            self._matmul_setattr(self.matmul, "fp32_precision", self.script_new_api)

    def switch(self, on: bool) -> None:
        self.active = on
        if self.applied is False:
            return  # refused: the precision is the script's
        if on:
            self._set_precision("high")
        else:
            self._give_back()

    def verify(self, final: bool) -> tuple[bool, str] | None:
        precision = torch.get_float32_matmul_precision()
        return precision in ("high", "medium"), f"matmul precision reads {precision!r}"


APPLIERS: tuple[type[Applier], ...] = (AmpBf16, AmpFp16, Tf32)
