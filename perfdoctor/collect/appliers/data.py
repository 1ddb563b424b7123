"""Input-pipeline appliers: DataLoader workers, pinned memory, non-blocking copies.

DataLoader arguments are changed by patching DataLoader.__init__ once, with the arguments
bound through inspect.signature so it is known exactly what the script passed (positionally
or by keyword): an explicit choice is never overridden. Workers are refused where they are
unsafe (mechanics §3.b): an IterableDataset (each worker would yield the whole stream), a
dataset or collate_fn that does not pickle when the start method is not fork, a script
without a __main__ guard under spawn/forkserver, and a dataset holding CUDA tensors.
persistent_workers is never turned on: it freezes the workers' copy of the dataset, and a
script that changes its dataset between epochs would silently train on stale data.
The dataloader-workers variant changes one thing, num_workers: the main process keeps the
intra-op threads the script gave it (changing them is cpu-threads', its own variant, which
counts the same cores: usable cores less the workers). The parent sizes the count from the
baseline's measured split of the step (perfdoctor/optimize/sizing.py) and passes it in the
environment (PERFDOCTOR_DATALOADER_WORKERS, the reason in PERFDOCTOR_DATALOADER_WORKERS_WHY);
without it the count is min(4, usable cores - 1). The record says the count, why, and the
threads it left as they were.
Fewer workers. A count the script chose is kept, except where the parent says its count is
fewer than the script's (PERFDOCTOR_DATALOADER_WORKERS_FEWER=1, sizing.fewer_workers: the
script's workers exceed the cores and the steps wait on their hand-off): then a loader built
with more workers than that count gets that count, 0 included, and a loader with fewer is
left alone (an evaluation loader with num_workers=0 gets none).
prefetch_factor keeps torch's default (2 batches in flight per worker) unless the script set
it: with enough workers to keep up, that already hides a steady per-batch cost.

Rebuilt loaders. Hugging Face Accelerate (and the Trainer through it) iterates not the
script's DataLoader but a new one built from it, over the same dataset, with the changed
arguments copied (`num_workers=2`). Such a copy is no choice of the script's: it is
recorded as changed like its source, so the checks follow the loader actually iterated.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import os
import pickle
import sys
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from perfdoctor.collect.appliers import base
from perfdoctor.collect.appliers.base import (
    THREADS_RETARGET_KEY,
    TWIN_WORKERS_KEY,
    Applier,
    ApplyContext,
    is_compiling,
    one_line,
    usable_cores,
)
from perfdoctor.optimize.sizing import (
    CPU_MAX_WORKERS,
    TWIN_DETAIL,
    WORKERS_ENV,
    WORKERS_FEWER_ENV,
    WORKERS_WHY_ENV,
    default_workers,
)

log = logging.getLogger(__name__)

_MULTIPROCESS_ITER = "_MultiProcessingDataLoaderIter"
_SHARED_KEY = "dataloader_patch"

Adjuster = Callable[[DataLoader, dict[str, Any]], dict[str, Any] | None]


def _where() -> str:
    """file:line of the script code that built the DataLoader (first frame outside torch
    and perfdoctor)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("torch") or name.startswith("perfdoctor")):
            return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class LoaderPatch:
    """One patch of DataLoader.__init__/__iter__ shared by every data applier."""

    def __init__(self, ctx: ApplyContext) -> None:
        self.adjusters: list[tuple[Applier, Adjuster]] = []
        # What the latest iterator of each changed loader was. Not the iterator itself: a
        # reference would keep a stopped epoch's worker processes alive.
        self.iterators: weakref.WeakKeyDictionary[DataLoader, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self.changed: weakref.WeakKeyDictionary[DataLoader, dict[str, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )
        # In-process A/B: loaders left as the script built them, each with the arguments of
        # its multi-worker twin (SwitchedWorkers), and the twins themselves.
        self.switched: weakref.WeakKeyDictionary[DataLoader, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self.passthrough = False  # building a twin: the script's arguments as given
        self.on_iter: list[Callable[[DataLoader, Any], Any]] = []
        original_init = DataLoader.__init__
        original_iter = DataLoader.__iter__
        signature = inspect.signature(original_init)
        patch = self

        def init(loader: DataLoader, *args: Any, **kwargs: Any) -> None:
            if patch.passthrough:
                original_init(loader, *args, **kwargs)
                return
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:
                original_init(loader, *args, **kwargs)  # let torch report the bad call
                return
            explicit = dict(bound.arguments)
            inherited = patch.rebuilt_from(explicit)
            if inherited is not None:
                original_init(loader, *args, **kwargs)
                patch.changed[loader] = inherited
                for applier, _ in patch.adjusters:
                    if applier.id in inherited:
                        applier.note(
                            f"{_where()}: a DataLoader rebuilt from a changed one keeps "
                            f"its {_describe(inherited[applier.id])}"
                        )
                return
            changes: dict[str, dict[str, Any]] = {}
            for applier, adjust in patch.adjusters:
                change = adjust(loader, explicit)
                if change:
                    changes[applier.id] = change
                    bound.arguments.update(change)
            if not changes:
                original_init(loader, *args, **kwargs)
                return
            try:
                original_init(*bound.args, **bound.kwargs)
            except (ValueError, TypeError, RuntimeError) as exc:
                for applier, _ in patch.adjusters:
                    if applier.id in changes:
                        applier.note(f"DataLoader rejected the change: {one_line(exc, 100)}")
                original_init(loader, *args, **kwargs)
                return
            patch.changed[loader] = changes

        def iterate(loader: DataLoader) -> Any:
            iterator = original_iter(loader)
            for wrap in patch.on_iter:
                iterator = wrap(loader, iterator)
            if loader in patch.changed and not isinstance(iterator, SwitchingIterator):
                patch.iterators[loader] = {
                    "class": type(iterator).__name__,
                    "workers": getattr(iterator, "_num_workers", 0),
                    "pin_memory": bool(getattr(iterator, "_pin_memory", False)),
                }
            return iterator

        ctx.patcher.patch(DataLoader, "__init__", init)
        ctx.patcher.patch(DataLoader, "__iter__", iterate)

    @classmethod
    def shared(cls, ctx: ApplyContext) -> LoaderPatch:
        if _SHARED_KEY not in ctx.shared:
            ctx.shared[_SHARED_KEY] = cls(ctx)
        return ctx.shared[_SHARED_KEY]

    def rebuilt_from(self, explicit: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
        """The changes of a changed loader that `explicit` (a new loader's arguments) copies:
        the same dataset object and every changed argument passed with the changed value."""
        dataset = explicit.get("dataset")
        if dataset is None:
            return None
        for source, changes in list(self.changed.items()):
            if getattr(source, "dataset", None) is not dataset:
                continue
            values = {k: v for change in changes.values() for k, v in change.items()}
            if all(k in explicit and explicit[k] == v for k, v in values.items()):
                return changes
        return None

    def loaders_changed_by(self, applier_id: str) -> list[tuple[DataLoader, dict[str, Any]]]:
        return [(ld, ch[applier_id]) for ld, ch in list(self.changed.items()) if applier_id in ch]

    def latest_iterator(self, loader: DataLoader) -> dict[str, Any] | None:
        return self.iterators.get(loader)


def _describe(change: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in change.items())


def start_method(context: Any) -> str:
    """The multiprocessing start method DataLoader workers will use, without fixing the
    global default (multiprocessing.get_start_method() would, and a later
    set_start_method() in the script would then fail)."""
    if isinstance(context, str):
        return context
    if context is not None and hasattr(context, "get_start_method"):
        return str(context.get_start_method())
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen:
        return chosen
    if sys.platform == "linux":
        return "fork" if sys.version_info < (3, 14) else "forkserver"
    return "spawn"


def _holds_cuda_tensors(dataset: Any) -> bool:
    values = list(getattr(dataset, "__dict__", {}).values())
    for value in list(values):
        if isinstance(value, (tuple, list)):
            values.extend(value[:8])
    return any(isinstance(v, torch.Tensor) and v.is_cuda for v in values)


def _main_has_guard() -> bool:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            source = fh.read()
    except OSError:
        return True
    return "__name__" in source and "__main__" in source


def worker_refusal(args: dict[str, Any]) -> str | None:
    """Why worker processes are unsafe for a DataLoader built with `args` (None: safe)."""
    dataset = args.get("dataset")
    if isinstance(dataset, IterableDataset):
        return (
            f"{type(dataset).__name__} is an IterableDataset: without sharding by "
            "get_worker_info() every worker would yield the whole stream"
        )
    if _holds_cuda_tensors(dataset):
        return f"{type(dataset).__name__} holds CUDA tensors: workers cannot use them"
    method = start_method(args.get("multiprocessing_context"))
    if method != "fork":
        for what in ("dataset", "collate_fn", "worker_init_fn"):
            value = args.get(what)
            if value is None:
                continue
            try:
                pickle.dumps(value)
            except Exception as exc:
                return f"{what} cannot be pickled for {method} workers: {one_line(exc, 100)}"
        if not _main_has_guard():
            return (
                f"the script has no `if __name__ == '__main__'` guard: {method} workers "
                "would run it again"
            )
    return None


class SwitchingIterator:
    """The iterator the script gets from a loader under in-process A/B: its own iterator
    (the script's num_workers) while the fix is off, a persistent multi-worker iterator over
    the same dataset while it is on. It ends after len(loader) batches, as the script's own
    epoch does, whichever iterator fed them; the twin's workers persist across its epochs,
    so switching back on finds them started and their prefetch queue filled."""

    def __init__(self, loader: DataLoader, own: Any, applier: DataloaderWorkers) -> None:
        self._own = own
        self._applier = applier
        self._loader = loader
        self._left = len(own) if hasattr(own, "__len__") else None
        # Start the twin's workers now: they fill their prefetch queue while the warm-up
        # and the baseline's blocks run (the fix's first block never counts either).
        self._twin_ok = applier.start_twin(loader)

    def __iter__(self) -> SwitchingIterator:
        return self

    def __len__(self) -> int:
        return len(self._own)

    def __next__(self) -> Any:
        if self._left is not None:
            if self._left <= 0:
                raise StopIteration
            self._left -= 1
        if self._applier.active and self._twin_ok:
            return self._applier.next_from_twin(self._loader)
        return next(self._own)


class DataloaderWorkers(Applier):
    """Switchable (in-process A/B): the script's loaders are left as built; iterating one
    gives a SwitchingIterator over the script's own iterator and a persistent twin loader
    over the same dataset with the sized workers (two iterators, alternated by blocks)."""

    id = "dataloader-workers"
    switchable = True

    def install(self, ctx: ApplyContext) -> None:
        self.patch = LoaderPatch.shared(ctx)
        self.fewer = os.environ.get(WORKERS_FEWER_ENV, "").strip() == "1"
        self.workers, self.why = self._requested()
        spec = getattr(ctx.runtime, "spec", None)
        # Twins only in an A/B run that may switch this fix; a run that applies it for good
        # changes num_workers itself, so its record and its numerics are the fix's own.
        self.twins = getattr(spec, "ab", None) is not None and not self.fewer and self.workers > 0
        self.active = True
        self._twins: weakref.WeakKeyDictionary[DataLoader, DataLoader] = weakref.WeakKeyDictionary()
        self._twin_iters: weakref.WeakKeyDictionary[DataLoader, Any] = weakref.WeakKeyDictionary()
        self.patch.adjusters.append((self, self._adjust))
        if self.twins:
            self.patch.on_iter.append(self._wrap)
            # cpu-threads counts the twin's workers while they feed the steps (a coupled
            # arm: the workers with the threads the cores leave beside them).
            ctx.shared[TWIN_WORKERS_KEY] = self.feeding_workers
        self._ctx = ctx

    def switch(self, on: bool) -> None:
        self.active = on
        retarget = self._ctx.shared.get(THREADS_RETARGET_KEY)
        if callable(retarget):
            retarget()

    def feeding_workers(self) -> int | None:
        """The twin's worker count while the twin feeds the steps, else None."""
        if self.active and self.applied is not False and self.patch.switched:
            return self.workers
        return None

    def _wrap(self, loader: DataLoader, iterator: Any) -> Any:
        if loader not in self.patch.switched:
            return iterator
        return SwitchingIterator(loader, iterator, self)

    def start_twin(self, loader: DataLoader) -> bool:
        """The twin's workers started; False (and the fix refused, so its comparison ends
        "not applied") when the twin cannot be built: the script goes on with its own."""
        try:
            self.twin_iterator(loader)
        except Exception as exc:  # the script's own loader must keep working
            log.warning("DataLoader twin not started", exc_info=True)
            self.refuse(f"the DataLoader's multi-worker twin failed: {one_line(exc, 100)}")
            return False
        return True

    def twin_iterator(self, loader: DataLoader) -> Any:
        twin = self._twins.get(loader)
        if twin is None:
            args = self.patch.switched[loader]
            self.patch.passthrough = True
            try:
                twin = DataLoader(**args)
            finally:
                self.patch.passthrough = False
            self._twins[loader] = twin
        iterator = self._twin_iters.get(loader)
        if iterator is None:
            iterator = iter(twin)
            self._twin_iters[loader] = iterator
            self.patch.iterators[loader] = {
                "class": type(iterator).__name__,
                "workers": getattr(iterator, "_num_workers", 0),
                "pin_memory": bool(getattr(iterator, "_pin_memory", False)),
            }
        return iterator

    def next_from_twin(self, loader: DataLoader) -> Any:
        """The twin's next batch; its epoch ends on its own count, and a new one starts at
        once on the same (persistent) workers."""
        iterator = self.twin_iterator(loader)
        try:
            return next(iterator)
        except StopIteration:
            self._twin_iters.pop(loader, None)
            return next(self.twin_iterator(loader))

    def _count_env(self, name: str) -> int | None:
        """A positive count; 0 too where the count lowers the script's (in-process loading)."""
        text = os.environ.get(name, "").strip()
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value > 0 or (value == 0 and self.fewer):
            return value
        wanted = "a count >= 0" if self.fewer else "a positive integer"
        self.note(f"ignored {name}={text!r}: not {wanted}")
        self.fewer = False
        return None

    def _requested(self) -> tuple[int, str]:
        """The count the parent sized from the baseline, else min(4, usable cores - 1)."""
        cores = usable_cores()
        workers = self._count_env(WORKERS_ENV)
        if workers is not None:
            why = one_line(os.environ.get(WORKERS_WHY_ENV, ""), 160)
            return workers, why or f"{WORKERS_ENV}={workers}"
        return default_workers(cores), (
            f"no measured sizing: min({CPU_MAX_WORKERS}, {cores} cores - 1) workers"
        )

    def _adjust(self, loader: DataLoader, args: dict[str, Any]) -> dict[str, Any] | None:
        where = _where()
        user_workers = args.get("num_workers") or 0
        if self.fewer:
            return self._lower(where, int(user_workers))
        if user_workers:
            self.note(f"{where}: kept num_workers={user_workers} set by the script")
            return None
        reason = worker_refusal(args)
        if reason is not None:
            self.note(f"{where}: {reason}")
            if self.applied is None:
                self.detail = one_line(f"{where}: {reason}")
            return None
        if self.twins:
            self._twin_of(loader, where, args)
            return None
        if self.applied:
            self.note(f"{where}: num_workers 0 -> {self.workers}")
        else:
            # One change per variant: the threads are not this variant's (cpu-threads').
            self.mark_applied(
                f"{where}: num_workers 0 -> {self.workers}, intra-op threads left at "
                f"{torch.get_num_threads()} ({self.why})"
            )
        return {"num_workers": self.workers}

    def _twin_of(self, loader: DataLoader, where: str, args: dict[str, Any]) -> None:
        """Leave the loader as the script built it; remember its twin's arguments: the
        same ones with the workers, persistent so that they survive the switches."""
        twin = {k: v for k, v in args.items() if k != "self"}
        twin.update(num_workers=self.workers, persistent_workers=True)
        self.patch.switched[loader] = twin
        self.patch.changed[loader] = {self.id: {"num_workers": self.workers}}
        if not self.applied:
            self.mark_applied(
                f"{where}: num_workers 0 -> {self.workers} {TWIN_DETAIL} over "
                f"the same dataset, switched in blocks against the script's own iterator "
                f"({self.why})"
            )
        return None

    def _lower(self, where: str, user_workers: int) -> dict[str, Any] | None:
        """Fewer workers than the script's (no safety check: fewer workers, 0 included,
        is what the script's loader can always run with)."""
        if user_workers <= self.workers:
            self.note(f"{where}: kept num_workers={user_workers}, not above {self.workers}")
            return None
        change = f"{where}: num_workers {user_workers} -> {self.workers}"
        if self.applied:
            self.note(change)
        else:
            self.mark_applied(
                f"{change} (the script's, lowered), intra-op threads left at "
                f"{torch.get_num_threads()} ({self.why})"
            )
        return {"num_workers": self.workers}

    def verify(self, final: bool) -> tuple[bool, str] | None:
        changed = self.patch.loaders_changed_by(self.id)
        iterators = [self.patch.latest_iterator(loader) for loader, _ in changed]
        seen = [it for it in iterators if it is not None]
        if not seen:
            return (False, "the DataLoader given workers was never iterated") if final else None
        if self.fewer:
            lowered = [it for it in seen if it["workers"] == self.workers]
            return len(lowered) == len(seen), (
                f"{len(lowered)}/{len(seen)} iterated loaders run {self.workers} workers "
                f"({', '.join(sorted({it['class'] for it in seen}))})"
            )
        multi = [it for it in seen if it["class"] == _MULTIPROCESS_ITER]
        workers = max((it["workers"] for it in multi), default=0)
        ok = len(multi) == len(seen)
        return ok, (
            f"{len(multi)}/{len(seen)} iterated loaders multi-process ({workers} workers); "
            f"torch.get_num_threads() reads {torch.get_num_threads()}"
        )


class PinMemory(Applier):
    id = "pin-memory"

    def install(self, ctx: ApplyContext) -> None:
        if not base.cuda_available():
            self.refuse("pinned memory only helps copies to a CUDA device; this run has none")
            return
        self.patch = LoaderPatch.shared(ctx)
        self.patch.adjusters.append((self, self._adjust))

    def _adjust(self, loader: DataLoader, args: dict[str, Any]) -> dict[str, Any] | None:
        where = _where()
        if "pin_memory" in args:
            self.note(f"{where}: kept pin_memory={args['pin_memory']} set by the script")
            return None
        change = f"{where}: pin_memory False -> True"
        if self.applied:
            self.note(change)
        else:
            self.mark_applied(change)
        return {"pin_memory": True}

    def verify(self, final: bool) -> tuple[bool, str] | None:
        changed = self.patch.loaders_changed_by(self.id)
        seen = [self.patch.latest_iterator(loader) for loader, _ in changed]
        seen = [it for it in seen if it is not None]
        if not seen:
            return (False, "the pinned DataLoader was never iterated") if final else None
        pinned = sum(it["pin_memory"] for it in seen)
        return pinned == len(seen), f"{pinned}/{len(seen)} iterated loaders pin their batches"


def _target_device_type(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    target = args[0] if args else kwargs.get("device")
    if isinstance(target, torch.Tensor):
        return target.device.type
    if isinstance(target, torch.device):
        return target.type
    if isinstance(target, str):
        return target.split(":", 1)[0]
    if isinstance(target, int) and not isinstance(target, bool):
        return "cuda"
    return None


class NonBlockingCopies(Applier):
    """Tensor.to / Tensor.cuda from pinned CPU memory to CUDA get non_blocking=True when the
    call did not say. Only pinned sources: from pageable memory the copy is synchronous
    anyway, and there is nothing to gain."""

    id = "non-blocking-copies"

    def install(self, ctx: ApplyContext) -> None:
        if not base.cuda_available():
            self.refuse("non-blocking copies are CPU -> CUDA copies; this run has no CUDA device")
            return
        self.converted = 0
        self.pageable = 0
        original_to = torch.Tensor.to
        original_cuda = torch.Tensor.cuda
        applier = self

        def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if (
                "non_blocking" not in kwargs
                and not is_compiling()
                and tensor.device.type == "cpu"
                and len(args) < (2 if args and isinstance(args[0], torch.Tensor) else 3)
                and _target_device_type(args, kwargs) == "cuda"
            ):
                if tensor.is_pinned():
                    kwargs["non_blocking"] = True
                    applier.converted += 1
                else:
                    applier.pageable += 1
            return original_to(tensor, *args, **kwargs)

        def cuda(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if (
                "non_blocking" not in kwargs
                and len(args) < 2
                and not is_compiling()
                and tensor.device.type == "cpu"
            ):
                if tensor.is_pinned():
                    kwargs["non_blocking"] = True
                    applier.converted += 1
                else:
                    applier.pageable += 1
            return original_cuda(tensor, *args, **kwargs)

        ctx.patcher.patch(torch.Tensor, "to", to)
        ctx.patcher.patch(torch.Tensor, "cuda", cuda)
        self.mark_applied("pinned CPU -> CUDA copies issued with non_blocking=True")

    def verify(self, final: bool) -> tuple[bool, str] | None:
        if self.converted == 0:
            if not final:
                return None
            return False, (
                f"no copy from pinned memory was seen ({self.pageable} from pageable memory): "
                "needs pin-memory"
            )
        return True, f"{self.converted} copies made non-blocking, {self.pageable} pageable left"


APPLIERS: tuple[type[Applier], ...] = (DataloaderWorkers, PinMemory, NonBlockingCopies)
