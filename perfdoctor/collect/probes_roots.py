"""Root models: which modules the optimizers train, timed per forward (mechanics §3.0).

Discovery: global module forward hooks (about 3.8 us per module call) see which modules run
at forward depth 0 outside backward and hold parameters. At the first optimizer step the
roots are the smallest set of those candidates covering the parameters the optimizers train
(GAN: two roots; a frozen teacher or an EMA copy trains nothing and is left out; a DDP
wrapper shares its Parameters, so the wrapper is the root). Then the global hooks are
removed and only the roots carry cheap hooks, which time forwards, mark the start of an
iteration, count distinct input shapes and watch for graphs that never reach backward
(evaluation without no_grad).
"""

from __future__ import annotations

import copy
import logging
import sys
import types
import warnings
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from perfdoctor.analyze.frames import UserCode
from perfdoctor.collect.probes_steps import StepTracker

log = logging.getLogger(__name__)

MAX_SHAPES = 1000
MAX_WATCHED_OUTPUTS = 4
# The grad-use watch (a pre-hook on each output's grad_fn, and the call site) costs a few
# microseconds per forward, the most of any per-step probe on a small model. It watches
# every forward that may be an evaluation or a rollout: one of a model in eval mode, and
# every root forward after the first in its step (a step's extra forwards). A step's first
# forward in train mode is the training forward almost always: the first GRAD_WATCH_FIRST of
# them are watched, then one in GRAD_WATCH_EVERY, which then stands for GRAD_WATCH_EVERY
# forwards in the counts (so the counts and shares stay estimates of all forwards).
GRAD_WATCH_FIRST = 64
GRAD_WATCH_EVERY = 16


def _is_compiling_fn(torch: Any) -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    if fn is None:
        fn = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return fn if fn is not None else (lambda: False)


def first_tensor_shape(torch: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    tensor_cls = torch.Tensor
    for value in args:
        if isinstance(value, tensor_cls):
            return tuple(value.shape)
    if kwargs:
        for value in kwargs.values():
            if isinstance(value, tensor_cls):
                return tuple(value.shape)
    return None


# The hook dicts that hold the hook functions themselves (the others hold flags).
_HOOKS_HELD = ("_forward_pre_hooks", "_forward_hooks")
# The per-module hook dicts a forward pre-hook and a forward hook are registered in.
_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


class PrivateHooks(OrderedDict):  # type: ignore[type-arg]
    """A module's hook dict whose perfdoctor entries stay out of copies and pickles.

    Our hooks are bound to objects that hold the torch module, the step tracker and the
    script's frames: they can neither pickle nor deep-copy. `torch.save(model, path)` and
    `copy.deepcopy(model)` (EMA code) must work as without perfdoctor, and the copy must not
    be timed as a root, so both see a plain OrderedDict holding only the user's own hooks.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.private_ids: set[int] = set()

    def public(self) -> OrderedDict:  # type: ignore[type-arg]
        return OrderedDict((k, v) for k, v in self.items() if k not in self.private_ids)

    def __reduce__(self) -> Any:
        return (OrderedDict, (list(self.public().items()),))

    def __deepcopy__(self, memo: dict[int, Any]) -> OrderedDict:  # type: ignore[type-arg]
        return copy.deepcopy(self.public(), memo)

    def __copy__(self) -> OrderedDict:  # type: ignore[type-arg]
        return self.public()

    def copy(self) -> OrderedDict:  # type: ignore[type-arg,override]
        return self.public()


def _private_hook_dicts(module: Any) -> list[PrivateHooks]:
    """Swap the module's empty forward hook dicts for PrivateHooks. A dict that already
    holds the user's hooks stays: their handles keep weak references to it, and a swap
    would make their remove() miss (our hooks there still copy, see InertWhenCopied)."""
    found = []
    for name in _HOOK_DICTS:
        current = module.__dict__.get(name)
        if isinstance(current, PrivateHooks):
            found.append(current)
        elif isinstance(current, dict) and not current:
            replacement = PrivateHooks()
            object.__setattr__(module, name, replacement)
            found.append(replacement)
    return found


def inert_hook(*_args: Any, **_kwargs: Any) -> None:
    """What a copied or unpickled perfdoctor hook becomes: nothing."""
    return None


class InertWhenCopied:
    """A hook that pickles and deep-copies as `inert_hook` (the copy is no root of ours)."""

    __slots__ = ("_call",)

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __reduce__(self) -> Any:
        return (_inert, ())

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return inert_hook

    def __copy__(self) -> Any:
        return inert_hook


def _inert() -> Callable[..., None]:
    return inert_hook


class GradUse:
    """Forwards that built an autograd graph which no backward ever reached.

    Each watched output's grad_fn gets a pre-hook that flips a flag when backward passes
    through it. Only the flag and the call site are kept (never the graph, which would keep
    activations alive). A forward is judged one step after its own step closed, since a
    step boundary may fall between a forward and its backward.
    """

    def __init__(self, user_code: UserCode, torch: Any) -> None:
        self._user_code = user_code
        self._tensor_cls = torch.Tensor
        self._current: list[list[Any]] = []
        self._previous: list[list[Any]] = []
        self.pending = False  # records wait for a step's close to be judged
        self.watched = 0  # forwards with a graph, each watched one counted by its weight
        # Steps' first train-mode grad forwards, the sampled kind (RootFinder._exit).
        self.first_forwards = 0
        self.unused: Counter[tuple[str, int, str] | None] = Counter()
        self._user_codes: dict[Any, bool] = {}  # code object -> is the user's

    def watch(self, output: Any, frame: Any, weight: int = 1) -> None:
        nodes = self._graph_nodes(output)
        if not nodes:
            return
        record: list[Any] = [False, self._caller_key(frame), weight]

        def reached(_grad_outputs: Any, record: list[Any] = record) -> None:
            record[0] = True

        for node in nodes:
            try:
                node.register_prehook(reached)
            except Exception:
                return
        self.watched += weight
        self._current.append(record)
        self.pending = True

    def _caller_key(self, frame: Any) -> tuple[str, int, str] | None:
        """UserCode.caller_key, with the verdict kept per code object (the same few frames
        between the hook and the user's line come back on every forward)."""
        known = self._user_codes
        while frame is not None:
            code = frame.f_code
            user = known.get(code)
            if user is None:
                user = known[code] = self._user_code.is_user_file(code.co_filename)
            if user:
                return (code.co_filename, frame.f_lineno, code.co_name)
            frame = frame.f_back
        return None

    def _graph_nodes(self, output: Any) -> list[Any]:
        tensor_cls = self._tensor_cls
        if isinstance(output, tensor_cls):
            candidates: list[Any] = [output]
        elif isinstance(output, (tuple, list)):
            candidates = list(output[:MAX_WATCHED_OUTPUTS])
        elif isinstance(output, dict):
            candidates = list(output.values())[:MAX_WATCHED_OUTPUTS]
        else:
            return []
        nodes = []
        for value in candidates:
            if isinstance(value, tensor_cls):
                node = value.grad_fn
                if node is not None:
                    nodes.append(node)
        return nodes

    def step_closed(self) -> None:
        self._judge(self._previous)
        self._previous, self._current = self._current, []
        self.pending = bool(self._previous)

    def finish(self, *, script_ended_normally: bool) -> None:
        self._judge(self._previous)
        if script_ended_normally:
            # Every backward the script was going to run has run.
            self._judge(self._current)
        self._previous, self._current = [], []
        self.pending = False

    def _judge(self, records: list[list[Any]]) -> None:
        for reached, key, weight in records:
            if not reached:
                self.unused[key] += weight

    def summary(self) -> dict[str, Any]:
        locations = []
        for key, count in self.unused.most_common(10):
            if key is None:
                continue
            loc = self._user_code.location(*key)
            loc["count"] = count
            locations.append(loc)
        return {
            "grad_forwards": self.watched,
            "grad_without_backward": int(sum(self.unused.values())),
            "locations": locations,
        }


class RootFinder:
    def __init__(self, torch: Any, tracker: StepTracker, user_code: UserCode) -> None:
        self._torch = torch
        self._tracker = tracker
        self._is_compiling = _is_compiling_fn(torch)
        self._graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
        self.grad_use = GradUse(user_code, torch)
        self.roots: list[Any] = []
        self.resolved = False
        self.track_shapes = False
        # Distinct training input shapes per root (id): a GAN's generator and discriminator
        # each see their own shape, which is no shape change.
        self.shapes: dict[int, set[Any]] = {}
        self.root_calls = 0
        self.nvtx: Any = None
        self._candidates: dict[int, Any] = {}
        self._discovery_calls: dict[int, int] = {}
        self._has_params: dict[int, bool] = {}
        self._batch_dims: dict[int, int] = {}
        self._global_handles: list[Any] = []
        self._root_handles: list[Any] = []
        self._depth = 0
        self._stack: list[float | None] = []
        self._root_ids: set[int] = set()
        self._nvtx_handle: Any = None
        self._tensor_cls = torch.Tensor
        self._is_grad_enabled = torch.is_grad_enabled
        self._forward_kind: str | None = None  # of the depth-0 forward in flight
        self._forward_grad = False  # grad mode at its start
        self.hook_mode = "discovery"  # then "per-root", or "global" (see resolve)
        self.found_on_stack = False

    # ------------------------------------------------------------------ discovery

    def start_discovery(self) -> None:
        from torch.nn.modules import module as module_mod

        # torch warns on every call of a torch.compile'd module while global hooks exist;
        # they are ours, and they fire for the wrapper only (depth 0), so say nothing.
        warnings.filterwarnings(
            "ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks"
        )

        self._global_handles.append(module_mod.register_module_forward_pre_hook(self._global_pre))
        try:
            handle = module_mod.register_module_forward_hook(self._global_post, always_call=True)
        except TypeError:  # torch without always_call
            handle = module_mod.register_module_forward_hook(self._global_post)
        self._global_handles.append(handle)

    def _global_pre(self, module: Any, args: Any) -> None:
        if self._is_compiling():
            return
        t0 = None
        if self._depth == 0 and self._graph_task_id() == -1:
            if self.resolved:
                if id(module) in self._root_ids:
                    t0 = self._enter(module, args, None)
            elif self._holds_params(module):
                key = id(module)
                if key not in self._candidates:
                    self._candidates[key] = module
                self._discovery_calls[key] = self._discovery_calls.get(key, 0) + 1
                t0 = self._enter(module, args, None)
        self._depth += 1
        self._stack.append(t0)

    def _global_post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return
        if self._depth:
            self._depth -= 1
        t0 = self._stack.pop() if self._stack else None
        if t0 is not None:
            self._exit(t0, output)

    def _holds_params(self, module: Any) -> bool:
        key = id(module)
        known = self._has_params.get(key)
        if known is None:
            known = next(module.parameters(), None) is not None
            self._has_params[key] = known
        return known

    def resolve(self, optimizers: list[Any]) -> list[Any]:
        """Pick the roots, then swap the global hooks for per-root hooks, unless torch.compile
        already compiled code while the global hooks were registered: Dynamo guards on their
        count, so removing them would recompile every compiled function. Compiled modules
        run their inner modules' hooks inside the graph (as no-ops), so keeping the global
        hooks costs little there."""
        if self.resolved:
            return self.roots
        self.resolved = True
        self.roots = self._choose(list(self._candidates.values()), optimizers)
        if not self.roots and optimizers:
            # No module forward was seen (an in-place `model.compile()` runs its hooks
            # inside the graph; `model.forward(x)` bypasses them): look at the objects
            # the user's code holds right now.
            self.roots = self._choose(self._modules_on_stack(sys._getframe(1)), optimizers)
            self.found_on_stack = bool(self.roots)
        self._root_ids = {id(root) for root in self.roots}
        for root in self.roots:
            self.root_calls += self._discovery_calls.get(id(root), 0)
        if self._compiled_under_global_hooks():
            self.hook_mode = "global"
            return self.roots
        self.hook_mode = "per-root"
        for handle in self._global_handles:
            handle.remove()
        self._global_handles.clear()
        self._depth = 0
        self._stack.clear()
        for root in self.roots:
            self._hook_root(root)
        return self.roots

    def _compiled_under_global_hooks(self) -> bool:
        if "torch._dynamo" not in sys.modules:
            return False
        try:
            from torch._dynamo.utils import counters

            return int(counters["frames"].get("ok", 0)) > 0
        except Exception:
            return any(hasattr(m, "_orig_mod") for m in self._candidates.values())

    def _modules_on_stack(self, frame: Any) -> list[Any]:
        """nn.Modules referenced by the frames on the stack and by `__main__`, and one
        attribute level below (a trainer object's `self.model`)."""
        module_cls = self._torch.nn.Module
        found: dict[int, Any] = {}

        def consider(value: Any, depth: int) -> None:
            if isinstance(value, module_cls):
                found.setdefault(id(value), value)
                return
            if depth or isinstance(value, (type, types.ModuleType)):
                return
            try:  # vars() reads __dict__ without running properties or __getattr__
                attributes = list(vars(value).values())
            except TypeError:
                return
            for attribute in attributes:
                consider(attribute, 1)

        namespaces = []
        while frame is not None:
            namespaces.append(frame.f_locals)
            frame = frame.f_back
        main = sys.modules.get("__main__")
        if main is not None:
            namespaces.append(vars(main))
        for namespace in namespaces:
            for value in list(namespace.values()):
                consider(value, 0)
        return list(found.values())

    def _choose(self, candidates: list[Any], optimizers: list[Any]) -> list[Any]:
        if optimizers:
            wanted = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
        else:
            wanted = {id(p) for m in candidates for p in m.parameters() if p.requires_grad}
            if not wanted:  # inference-only: every parameter counts
                wanted = {id(p) for m in candidates for p in m.parameters()}
        scored = []
        for order, module in enumerate(candidates):
            covered = {id(p) for p in module.parameters()} & wanted
            if covered:
                # Same parameters: the wrapper (DDP, torch.compile) holds more modules.
                size = sum(1 for _ in module.modules())
                scored.append((len(covered), size, order, module, covered))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
        chosen: list[tuple[int, Any]] = []
        seen: set[int] = set()
        for _, _, order, module, covered in scored:
            if not covered <= seen:
                chosen.append((order, module))
                seen |= covered
        return [module for _, module in sorted(chosen, key=lambda item: item[0])]

    # ------------------------------------------------------------------ per-root hooks

    def _hook_root(self, root: Any) -> None:
        try:
            dicts = _private_hook_dicts(root)
        except Exception:  # a module that refuses attribute writes: hooks work without it
            log.debug("could not make the hook dicts private", exc_info=True)
            dicts = []
        # Where both dicts our hooks go into are private, no copy or pickle ever sees the
        # hooks: the bound methods go in as they are (InertWhenCopied's layer costs a call
        # per forward and per hook). Otherwise they copy as inert hooks.
        mine = root.__dict__
        all_private = all(isinstance(mine.get(n), PrivateHooks) for n in _HOOKS_HELD)

        def hook(method: Callable[..., Any]) -> Any:
            return method if all_private else InertWhenCopied(method)

        try:
            pre = root.register_forward_pre_hook(
                hook(self._root_pre), prepend=True, with_kwargs=True
            )
        except TypeError:
            pre = root.register_forward_pre_hook(hook(self._root_pre_args))
        try:
            post = root.register_forward_hook(hook(self._root_post), always_call=True)
        except TypeError:
            post = root.register_forward_hook(hook(self._root_post))
        self._root_handles.extend([pre, post])
        for private in dicts:
            private.private_ids.update((pre.id, post.id))

    def _root_pre_args(self, module: Any, args: Any) -> None:
        self._root_pre(module, args, None)

    def _root_pre(self, module: Any, args: Any, kwargs: Any) -> None:
        if self._is_compiling():
            return None
        t0 = None
        if self._depth == 0 and self._graph_task_id() == -1:
            t0 = self._enter(module, args, kwargs)
        # else: a root inside a root, or a checkpoint recompute during backward.
        self._depth += 1
        self._stack.append(t0)
        return None

    def _root_post(self, module: Any, args: Any, output: Any) -> None:
        if self._is_compiling():
            return None
        if self._depth:
            self._depth -= 1
        t0 = self._stack.pop() if self._stack else None
        if t0 is not None:
            self._exit(t0, output)
        return None

    # ------------------------------------------------------------------ one root forward

    def _enter(self, module: Any, args: Any, kwargs: Any) -> float:
        """A depth-0 forward of a root (or, before roots are known, of a candidate). Once
        per forward, so first_tensor_shape and the batch dimension's cache are inlined."""
        tensor_cls = self._tensor_cls
        shape = None
        for value in args:
            if isinstance(value, tensor_cls):
                shape = value.shape  # a torch.Size: a tuple, hashed and compared as one
                break
        else:
            if kwargs:
                shape = first_tensor_shape(self._torch, (), kwargs)
        batch = None
        if shape:
            # The batch is what the model received, not what the DataLoader was built with
            # (a script may slice a big batch, or feed a sequence model time-major).
            dim = self._batch_dims.get(id(module))
            if dim is None:
                dim = self._batch_dim(module)
            if len(shape) > dim:
                batch = shape[dim]
        t0 = self._tracker.forward_start(batch)  # may stop the script: before depth moves
        grad = self._forward_grad = self._is_grad_enabled()
        # Forwards that train nothing (evaluation, rollouts) are named in the loop account.
        self._forward_kind = (
            "eval" if not getattr(module, "training", True) else None if grad else "no_grad"
        )
        if self.resolved:
            self.root_calls += 1
            # Training forwards only: an evaluation's batch (no_grad, another size) is not a
            # shape the training loop's compiled graph or cuDNN plans have to handle.
            if self.track_shapes and shape is not None and grad:
                seen = self.shapes.get(id(module))
                if seen is None:
                    seen = self.shapes[id(module)] = set()
                if len(seen) < MAX_SHAPES:
                    seen.add(shape)
        if self.nvtx is not None:
            self._nvtx_handle = self.nvtx.start("forward")
        return t0

    def _exit(self, t0: float, output: Any) -> None:
        in_step = self._tracker.forward_end(t0, self._forward_kind)
        if self.nvtx is not None:
            self.nvtx.end(self._nvtx_handle)
        if self.resolved and self._forward_grad:
            grad_use = self.grad_use
            if self._forward_kind is None and in_step <= 1:
                # GradUse.forward's sampling, inlined: most forwards stop here.
                count = grad_use.first_forwards = grad_use.first_forwards + 1
                if count > GRAD_WATCH_FIRST and count % GRAD_WATCH_EVERY:
                    return
                weight = 1 if count <= GRAD_WATCH_FIRST else GRAD_WATCH_EVERY
            else:
                weight = 1
            # Frames above: Module._call_impl and its helpers, then the user's call site.
            grad_use.watch(output, sys._getframe(2), weight)

    def _batch_dim(self, module: Any) -> int:
        """1 for a time-major sequence model (recurrent or attention layers built with
        batch_first=False take (seq, batch, ...): word_language_model's (35, 20) batch is
        20 sequences), else 0."""
        key = id(module)
        known = self._batch_dims.get(key)
        if known is None:
            nn = self._torch.nn
            kinds = tuple(
                k
                for k in (getattr(nn, "RNNBase", None), getattr(nn, "MultiheadAttention", None))
                if k is not None
            )
            flags = []
            try:
                for sub in module.modules():
                    if kinds and isinstance(sub, kinds):
                        flags.append(bool(getattr(sub, "batch_first", False)))
            except Exception:
                log.debug("could not walk the module tree", exc_info=True)
            known = 1 if flags and not any(flags) else 0
            self._batch_dims[key] = known
        return known

    def distinct_shapes(self) -> int:
        """The most distinct training input shapes any one root saw after warm-up."""
        return max((len(seen) for seen in self.shapes.values()), default=0)

    def remove_hooks(self) -> None:
        for handle in self._global_handles + self._root_handles:
            try:
                handle.remove()
            except Exception:
                log.debug("hook removal failed", exc_info=True)
        self._global_handles.clear()
        self._root_handles.clear()
