"""The torch patches and hooks that report events to the probes.

Every hook starts by stepping aside while Dynamo traces (`torch.compiler.is_compiling()`),
so perfdoctor never shows up in a compiled graph or its guards (mechanics §3.0). Hooks that
mark the start of an iteration call the StepTracker before doing anything else: that is
where `PlanComplete` is raised when the plan is done, before the user's next batch, forward
or backward runs. Everything per step is O(1) and free of host syncs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

from perfdoctor.collect.loop_probes import install_save_timer
from perfdoctor.collect.probes_closure import timed_closure
from perfdoctor.collect.probes_roots import _is_compiling_fn

if TYPE_CHECKING:
    from perfdoctor.collect.probes import Probes

log = logging.getLogger(__name__)


def install(probes: Probes) -> None:
    torch = probes.torch
    is_compiling = _is_compiling_fn(torch)
    _install_optimizer_hooks(probes, torch, is_compiling)
    _install_backward(probes, torch, is_compiling)
    _install_grad_scaler(probes, torch, is_compiling)
    _install_dataloader(probes, torch, is_compiling)
    _install_zero_grad(probes, torch, is_compiling)
    _install_autocast(probes, torch, is_compiling)
    _install_profiler_watch(probes, torch)
    install_save_timer(probes.tracker, torch, is_compiling)


def _record_failure(probes: Probes, what: str) -> None:
    log.debug("recording %s failed", what, exc_info=True)
    probes.runtime.warn(f"perfdoctor could not record {what}: {sys.exc_info()[1]!r}")


# --------------------------------------------------------------------------- optimizers


def _install_optimizer_hooks(probes: Probes, torch: Any, is_compiling: Any) -> None:
    from torch.optim import optimizer as optimizer_mod

    tracker = probes.tracker
    user_code = probes.user_code
    base_init = optimizer_mod.Optimizer.__init__

    @functools.wraps(base_init)
    def optimizer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        base_init(self, *args, **kwargs)
        try:
            probes.optimizer_constructed(self, user_code.caller(sys._getframe(1)))
        except Exception:
            _record_failure(probes, "an optimizer")

    optimizer_mod.Optimizer.__init__ = optimizer_init  # type: ignore[method-assign]

    # Depth counter: an optimizer stepping an inner optimizer (ZeroRedundancyOptimizer,
    # wrappers) is one step. A step that raised never runs its post-hook, so an optimizer
    # met again on the stack resets it.
    stack: list[Any] = []
    started: list[float] = [0.0]
    nvtx = probes.nvtx
    nvtx_handle: list[Any] = [None]

    # After a plan that lets the script run to its end (live[0] False) only the count of
    # each optimizer's steps goes on (the manifest's steps_run): no tracker, no timing. The
    # hooks stay registered: torch iterates its hook dicts while calling them, and the plan
    # ends inside this pre-hook.
    live = probes.hooks_live

    def pre_hook(opt: Any, args: Any, kwargs: Any) -> Any:
        if is_compiling():
            return None
        if stack and any(o is opt for o in stack):
            stack.clear()
        outer = not stack
        if outer and live[0]:
            started[0] = tracker.optimizer_start(opt)  # may stop the script
            if nvtx is not None:
                nvtx_handle[0] = nvtx.start("optimizer")
        stack.append(opt)
        if outer and live[0] and (len(args) > 1 or kwargs):  # step(closure) only
            return _closure_steps(opt, args, kwargs)
        return None

    def _closure_steps(opt: Any, args: Any, kwargs: Any) -> Any:
        """step(closure): each closure call becomes a step (probes_steps.closure_call), timed
        apart so the optimizer phase is the update alone (probes_closure.py). The hook's
        args start with the optimizer itself: step's own arguments follow."""
        closure = args[1] if len(args) > 1 else (kwargs or {}).get("closure")
        if not callable(closure):
            return None

        @functools.wraps(closure)
        def counted(*c_args: Any, **c_kwargs: Any) -> Any:
            if not is_compiling():
                tracker.closure_call(opt)  # may stop the script
                probes.closure_steps_seen(opt)
            return closure(*c_args, **c_kwargs)

        timed = timed_closure(tracker, counted)
        if len(args) > 1:
            return (args[0], timed, *args[2:]), kwargs
        return args, {**kwargs, "closure": timed}

    steps = probes.optimizer_steps
    roots = probes.roots

    def post_hook(opt: Any, args: Any, kwargs: Any) -> None:
        if is_compiling() or not stack:
            return
        stack.pop()
        if stack:
            return
        if live[0]:
            tracker.optimizer_end(opt, started[0])
            if nvtx is not None:
                nvtx.end(nvtx_handle[0])
            if not roots.resolved:
                probes.optimizer_stepped(opt)
                return
        key = id(opt)  # Probes.optimizer_stepped, without the call once roots are known
        steps[key] = steps.get(key, 0) + 1

    optimizer_mod.register_optimizer_step_pre_hook(pre_hook)
    optimizer_mod.register_optimizer_step_post_hook(post_hook)


# --------------------------------------------------------------------------- backward


def _install_backward(probes: Probes, torch: Any, is_compiling: Any) -> None:
    tracker = probes.tracker
    tensor_cls = torch.Tensor
    nvtx = probes.nvtx
    live = probes.hooks_live
    depth = [0]
    # GradScaler.scale(loss) -> the scaled tensor and the loss it came from, so the loss
    # series is the user's loss, not loss * scale.
    scaled: list[Any] = [None, None]

    def run(target: Any, call: Any, args: Any, kwargs: Any) -> Any:
        t0 = tracker.backward_start()  # may stop the script
        handle = nvtx.start("backward") if nvtx is not None else None
        depth[0] += 1
        loss = None
        try:
            # The loss: a one-element tensor (the user's, not GradScaler's scaled one).
            if isinstance(target, tensor_cls) and target.numel() == 1:
                ref = scaled[0]
                loss = scaled[1] if ref is not None and ref() is target else target
                if loss.is_cpu:
                    # Read now (no copy to wait for on the CPU) and kept as a float. Its
                    # tensor kept to the flush is a small allocation left among the
                    # step's large ones: the heap cannot reuse their freed space whole,
                    # and the next steps map fresh pages (the MLP of
                    # benchmarks/_peer_steps.py: 8.7 page faults a step, 0.4 plain, 0.06
                    # with the float). item() reads the value without a detached copy
                    # (~1.6 us a step on the null step's guest, session 9). A device loss
                    # stays a tensor: reading it would wait for the device (step_log
                    # copies them back once per flush).
                    try:
                        value: Any = float(loss.item())
                    except Exception:  # a complex loss, or a tensor subclass that refuses
                        value = loss.detach()  # item(): the tensor, as before
                    loss = value
                elif loss is target:  # (GradScaler's loss was detached when remembered)
                    loss = target.detach()
            return call(*args, **kwargs)
        finally:
            depth[0] -= 1
            tracker.backward_end(t0, loss)
            if nvtx is not None:
                nvtx.end(handle)

    original_tensor_backward = tensor_cls.backward

    @functools.wraps(original_tensor_backward)
    def tensor_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0] or not live[0] or is_compiling():
            return original_tensor_backward(self, *args, **kwargs)
        return run(self, original_tensor_backward, (self, *args), kwargs)

    tensor_cls.backward = tensor_backward  # type: ignore[method-assign]

    original_autograd_backward = torch.autograd.backward

    @functools.wraps(original_autograd_backward)
    def autograd_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0] or not live[0] or is_compiling():
            return original_autograd_backward(tensors, *args, **kwargs)
        target = tensors
        if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
            target = tensors[0]
        return run(target, original_autograd_backward, (tensors, *args), kwargs)

    torch.autograd.backward = autograd_backward
    probes.remember_scaled_loss = _scaled_loss_recorder(scaled, tensor_cls)


def _scaled_loss_recorder(slot: list[Any], tensor_cls: Any) -> Any:
    def remember(outputs: Any, scaled_outputs: Any) -> None:
        if isinstance(outputs, tensor_cls) and isinstance(scaled_outputs, tensor_cls):
            # A weak reference: holding the scaled loss would keep its whole graph alive.
            slot[0] = weakref.ref(scaled_outputs)
            slot[1] = outputs.detach()

    return remember


# --------------------------------------------------------------------------- GradScaler


def _install_grad_scaler(probes: Probes, torch: Any, is_compiling: Any) -> None:
    scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler_cls is None:
        scaler_cls = getattr(torch.cuda.amp, "GradScaler", None)
    if scaler_cls is None:
        return
    tracker = probes.tracker
    user_code = probes.user_code
    live = probes.hooks_live
    original_init = scaler_cls.__init__
    original_update = scaler_cls.update
    original_scale = scaler_cls.scale

    @functools.wraps(original_init)
    def scaler_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            probes.scaler_constructed(self, user_code.caller(sys._getframe(1)))
        except Exception:
            _record_failure(probes, "a GradScaler")

    @functools.wraps(original_update)
    def scaler_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        if live[0] and not is_compiling():
            # Called once per iteration, also when the inf check skipped optimizer.step.
            tracker.scaler_update(self)
        return original_update(self, *args, **kwargs)

    @functools.wraps(original_scale)
    def scaler_scale(self: Any, outputs: Any) -> Any:
        result = original_scale(self, outputs)
        if live[0] and not is_compiling():
            probes.remember_scaled_loss(outputs, result)
        return result

    scaler_cls.__init__ = scaler_init
    scaler_cls.update = scaler_update
    scaler_cls.scale = scaler_scale


# --------------------------------------------------------------------------- DataLoader


def _first_dim(batch: Any, tensor_cls: Any, depth: int = 0) -> int | None:
    if isinstance(batch, tensor_cls):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth >= 2:
        return None
    if isinstance(batch, (list, tuple)) and batch:
        return _first_dim(batch[0], tensor_cls, depth + 1)
    if isinstance(batch, dict) and batch:
        return _first_dim(next(iter(batch.values())), tensor_cls, depth + 1)
    return None


def _install_dataloader(probes: Probes, torch: Any, is_compiling: Any) -> None:
    from torch.utils.data import dataloader as dl

    tracker = probes.tracker
    user_code = probes.user_code
    tensor_cls = torch.Tensor
    nvtx = probes.nvtx
    live = probes.hooks_live
    loader_cls = dl.DataLoader
    original_init = loader_cls.__init__
    original_iter = loader_cls.__iter__
    original_next = dl._BaseDataLoaderIter.__next__
    init_signature = inspect.signature(original_init)

    @functools.wraps(original_init)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            bound = init_signature.bind(self, *args, **kwargs)
            explicit = [name for name in bound.arguments if name != "self"]
            record = probes.dataloader_constructed(
                self, explicit, user_code.caller(sys._getframe(1))
            )
            self._perfdoctor_record = record
        except Exception:
            _record_failure(probes, "a DataLoader")

    @functools.wraps(original_iter)
    def loader_iter(self: Any) -> Any:
        iterator = original_iter(self)
        try:
            iterator._perfdoctor_record = getattr(self, "_perfdoctor_record", None)
            if getattr(iterator, "_num_workers", 0):
                probes.worker_iterators.add(iterator)
        except Exception:
            log.debug("DataLoader iterator not tagged", exc_info=True)
        return iterator

    def loader_next(self: Any) -> Any:
        if not live[0] or is_compiling():
            return original_next(self)
        t0 = tracker.data_start()  # may stop the script before the batch is fetched
        handle = nvtx.start("data") if nvtx is not None else None
        batch_size = None
        try:
            batch = original_next(self)
            record = getattr(self, "_perfdoctor_record", None)
            if record is not None:
                record["batches"] += 1
                step = tracker.steps_closed
                if record["last_step"] != step:
                    record["last_step"] = step
                    record["steps_fed"] += 1
            # _first_dim, its common case inlined: a tuple or list of tensors.
            first = batch[0] if type(batch) in (tuple, list) and batch else batch
            if isinstance(first, tensor_cls):
                batch_size = int(first.shape[0]) if first.dim() > 0 else None
            else:
                batch_size = _first_dim(batch, tensor_cls)
            return batch
        finally:
            probes.any_data = True
            tracker.data_end(t0, batch_size)
            if nvtx is not None:
                nvtx.end(handle)

    functools.update_wrapper(loader_next, original_next)
    loader_cls.__init__ = loader_init
    loader_cls.__iter__ = loader_iter
    dl._BaseDataLoaderIter.__next__ = loader_next


# --------------------------------------------------------------------------- zero_grad


def _install_zero_grad(probes: Probes, torch: Any, is_compiling: Any) -> None:
    live = probes.hooks_live
    for owner in (torch.optim.Optimizer, torch.nn.Module):
        original = owner.zero_grad

        def zero_grad(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if live[0] and not is_compiling():
                set_to_none = bool(args[0] if args else kwargs.get("set_to_none", True))
                probes.zero_grad_called(set_to_none)
                if not set_to_none:
                    probes.locate("zero_grad", sys._getframe(1))
            return _original(self, *args, **kwargs)

        functools.update_wrapper(zero_grad, original)
        owner.zero_grad = zero_grad


# --------------------------------------------------------------------------- autocast


def _install_autocast(probes: Probes, torch: Any, is_compiling: Any) -> None:
    autocast_cls = getattr(getattr(torch, "amp", None), "autocast", None) or torch.autocast
    original_enter = autocast_cls.__enter__

    @functools.wraps(original_enter)
    def autocast_enter(self: Any) -> Any:
        if not is_compiling() and getattr(self, "_enabled", False):
            probes.autocast_entered(
                getattr(self, "device", None), getattr(self, "fast_dtype", None)
            )
        return original_enter(self)

    autocast_cls.__enter__ = autocast_enter


# --------------------------------------------------------------------------- profilers


def _install_profiler_watch(probes: Probes, torch: Any) -> None:
    """Notice the script's own profilers and NVTX emission (and back off ours)."""
    profile_cls = torch.profiler.profile
    original_start = profile_cls.start

    @functools.wraps(original_start)
    def profile_start(self: Any) -> Any:
        window = probes.profiler
        if window is None or not window.owns(self):
            probes.user_profiler_started("torch.profiler.profile")
            probes.locate("debug_mode", sys._getframe(1))
        return original_start(self)

    profile_cls.start = profile_start

    autograd_profiler = torch.autograd.profiler
    legacy_cls = autograd_profiler.profile
    legacy_enter = legacy_cls.__enter__

    @functools.wraps(legacy_enter)
    def legacy_profile_enter(self: Any) -> Any:
        if getattr(self, "enabled", True):
            probes.user_profiler_started("torch.autograd.profiler.profile")
            probes.locate("debug_mode", sys._getframe(1))
        return legacy_enter(self)

    legacy_cls.__enter__ = legacy_profile_enter

    nvtx_cls = getattr(autograd_profiler, "emit_nvtx", None)
    if nvtx_cls is not None:
        nvtx_enter = nvtx_cls.__enter__

        @functools.wraps(nvtx_enter)
        def emit_nvtx_enter(self: Any) -> Any:
            if getattr(self, "enabled", True):
                probes.emit_nvtx = True
                probes.locate("debug_mode", sys._getframe(1))
            return nvtx_enter(self)

        nvtx_cls.__enter__ = emit_nvtx_enter
    _install_anomaly_watch(probes, torch)


def _install_anomaly_watch(probes: Probes, torch: Any) -> None:
    """Where the script switched anomaly detection on (the setting itself is read later)."""
    anomaly = getattr(torch.autograd, "anomaly_mode", None)
    for name, enabled_of in (
        ("detect_anomaly", lambda args, kwargs: True),
        ("set_detect_anomaly", lambda args, kwargs: bool(args[0] if args else kwargs.get("mode"))),
    ):
        cls = getattr(anomaly, name, None)
        if cls is None:
            continue
        original = cls.__init__

        def init(
            self: Any, *args: Any, _original: Any = original, _on: Any = enabled_of, **kwargs: Any
        ) -> None:
            _original(self, *args, **kwargs)
            if _on(args, kwargs):
                probes.locate("debug_mode", sys._getframe(1))

        functools.update_wrapper(init, original)
        cls.__init__ = init
