"""Where one training iteration ends and the next begins, from events alone.

The hooks (probes_hooks.py) report events; this state machine turns them into steps. It
imports no torch, so its rules are tested with a fake clock.

Step signals ("step_detection"), decided while the script runs:

* ``optimizer``: step events are depth-0 optimizer steps and `GradScaler.update` calls (a
  skipped fp16 step never calls `optimizer.step`, but the scaler updates every iteration),
  and each call of the closure given to `optimizer.step(closure)`: LBFGS evaluates it up to
  max_iter times in one call, each a forward and backward, so each is a step.
* ``backward``: no optimizer was ever constructed when the first backward ran, or one exists
  but never stepped while gradients were cleared between backward calls (manual SGD), or
  `BACKWARD_FALLBACK_CALLS` backward calls passed without an optimizer step.
* ``time``: the last resort, for scripts with no optimizer and no backward but model
  forwards: windows of `time_window_s`. Never while an optimizer exists: forwards before
  its first step are an evaluation (nanoGPT's `estimate_loss()` at iteration 0), and the
  steps to time are the training steps that follow.

When does a step end? A step is *pending* once it saw a step event. It is closed at the start
of the next iteration, so the profiler's `ProfilerStep#N` span and our step N cover the same
interval and nothing is closed inside `optimizer.step` (mechanics §2.2):

* a step that fetched a DataLoader batch before its first step event is closed by the next
  DataLoader fetch only (GAN: D steps, then G's forward and step belong to the same
  iteration, until the next batch);
* otherwise by the next root forward, backward or fetch, once every step source seen so far
  has stepped in it (a GAN without a DataLoader is not split between D and G);
* a source that steps twice in one step always starts a new step (repeat rule): this keeps
  the count right whatever the order of events (WGAN critics, skipped fp16 steps).

Closures. `optimizer.step(closure)` (LBFGS, PyTorch Lightning's automatic optimization)
runs forward and backward *inside* the optimizer step. The closure's whole time (forward,
backward, and the script's code around them), and any forward, backward or fetch nested in
the step outside a closure, is taken out of the optimizer phase: the phases add up to at
most the step, and the optimizer phase is the update alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

BACKWARD_SOURCE = "backward"
# Modes whose steps end only after a step event (not by time): an open step without one is
# never pending, so a forward or backward in it changes nothing (the hot path skips _trigger).
_STEP_SIGNALS = ("optimizer", "backward")


class PlanComplete(BaseException):
    """Raised into the user's script after the last planned step.

    A BaseException, so that a script's `except Exception` around its loop does not swallow
    it; the bootstrap catches it and exits 0.
    """


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~3 us per step
class ClosedStep:
    """One step: filled in while it is open, then handed to the listener as it is (one
    object per step, not a copy: building a second one cost ~1 us per step)."""

    index: int
    start: float
    end: float = 0.0
    data_s: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0
    optimizer_s: float = 0.0
    data_calls: int = 0
    forward_calls: int = 0
    micro_batches: int = 0
    losses: Any = field(default_factory=list)  # a list while open, a tuple once closed
    batch_size: int | None = None
    closed_by: str = ""  # data / forward / backward / repeat / time / fallback / end
    # Work in the step that is no training (the loop account, analyze/loop_account.py): root
    # forwards of a model in eval mode, root forwards under no_grad of a model in train mode
    # (rollouts, generation), and torch.save calls (checkpoints).
    eval_forward_s: float = 0.0
    nograd_forward_s: float = 0.0
    save_s: float = 0.0
    # Open-step state, for the tracker's rules only.
    batch_from_model: bool = False  # batch_size came from a root's input
    sources: set[Any] = field(default_factory=set)
    data_driven: bool = False  # a DataLoader batch was fetched before the first step event
    closure_driven: bool = False  # a closure call of optimizer.step(closure) opened it

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    def close(self, end: float, closed_by: str) -> ClosedStep:
        self.end = end
        self.closed_by = closed_by
        self.losses = tuple(self.losses)
        return self


_OpenStep = ClosedStep  # the same object, before its close


class StepListener(Protocol):
    def step_started(self, index: int) -> None: ...

    def step_closed(self, step: ClosedStep) -> None: ...

    def plan_finished(self) -> None:
        """The last planned step closed: finish the window before the script is stopped."""

    def mode_changed(self, mode: str, note: str | None) -> None: ...


class StepTracker:
    """Turns hook events into steps (see the module docstring for the rules)."""

    BACKWARD_FALLBACK_CALLS = 64
    TIME_MODE_MIN_FORWARDS = 3
    TIME_MODE_MIN_WINDOWS = 2

    def __init__(
        self,
        listener: StepListener,
        *,
        plan_total: int | None,
        time_window_s: float,
        clock: Callable[[], float] = time.perf_counter,
        run_to_end: bool = False,
    ) -> None:
        self._listener = listener
        # --run-to-end: after the plan the script goes on untouched (the hooks only return)
        # instead of being stopped with PlanComplete.
        self._run_to_end = run_to_end
        self._plan_total = plan_total
        self._window = max(float(time_window_s), 1e-3)
        self._clock = clock
        self.mode: str | None = None
        self.steps_closed = 0
        self.stopped = False
        self._open: _OpenStep | None = None
        self._all_sources: set[Any] = set()
        self._optimizers_constructed = 0
        self._first_event: float | None = None
        self._forward_total = 0
        self._backward_total = 0
        self._undecided_backwards = 0
        self._leaving_time: str | None = None  # why time windows ended, for the next mode
        self._closure_calls = 0  # closure evaluations inside the current optimizer.step
        # Forward, backward and data time measured inside the running optimizer step.
        self._in_optimizer = False
        self._nested_s = 0.0
        self._closure_depth = 0

    # ------------------------------------------------------------------ events

    def optimizer_constructed(self) -> None:
        self._optimizers_constructed += 1

    def data_start(self) -> float:
        now = self._clock()
        self._trigger("data", now)
        step = self._open
        if step is not None and not step.sources:
            step.data_driven = True
        return self._clock()

    def data_end(self, t0: float, batch_size: int | None) -> None:
        step = self._open
        if step is None or self.stopped:
            return
        elapsed = self._clock() - t0
        step.data_s += elapsed
        step.data_calls += 1
        if self._in_optimizer and not self._closure_depth:
            self._nested_s += elapsed
        if step.batch_size is None and batch_size is not None and not step.batch_from_model:
            step.batch_size = batch_size

    def forward_start(self, batch: int | None = None) -> float:
        """`batch`: the batch size the root received (see input_batch), given here to save
        a call per forward."""
        now = self._clock()
        self._forward_total += 1
        step = self._open
        if step is None or step.sources or self.stopped or self.mode not in _STEP_SIGNALS:
            self._trigger("forward", now)  # (a step without a step event yet stays open)
            step = self._open
        if batch is not None and step is not None and not step.batch_from_model:
            step.batch_size = int(batch)
            step.batch_from_model = True
        return self._clock()

    def input_batch(self, size: int) -> None:
        """The batch size the model received in this step's first root forward: it wins
        over the DataLoader batch's first dimension (a script may slice its batches)."""
        step = self._open
        if step is not None and not step.batch_from_model:
            step.batch_size = int(size)
            step.batch_from_model = True

    def forward_end(self, t0: float, kind: str | None = None) -> int:
        """`kind`: "eval" (the model in eval mode), "no_grad" (no graph built), None (a
        training forward). Returns the open step's root forwards so far (0 without one)."""
        step = self._open
        if step is None or self.stopped:
            return 0
        elapsed = self._clock() - t0
        step.forward_s += elapsed
        step.forward_calls += 1
        if kind == "eval":
            step.eval_forward_s += elapsed
        elif kind == "no_grad":
            step.nograd_forward_s += elapsed
        if self._in_optimizer and not self._closure_depth:
            self._nested_s += elapsed
        return step.forward_calls

    def backward_start(self) -> float:
        now = self._clock()
        if self.stopped:
            self._stop_script()
            return now
        self._backward_total += 1
        if self.mode == "time":
            self._leaving_time = (
                f"a backward pass after {self.steps_closed} time-window step(s); the steps "
                "before it were time windows"
            )
            self._set_mode(None, None)
            self._all_sources.clear()
        if self.mode is None and self._optimizers_constructed == 0:
            self._set_mode("backward", None)
        step = self._open
        if self.mode == "backward" and step is not None and BACKWARD_SOURCE in step.sources:
            self._close(now, "repeat")
            step = None
        if step is None or step.sources or self.mode not in _STEP_SIGNALS:
            self._trigger("backward", now)  # (as in forward_start)
        return self._clock()

    def backward_end(self, t0: float, loss: Any) -> None:
        step = self._open
        if step is None or self.stopped:
            return
        now = self._clock()
        step.backward_s += now - t0
        step.micro_batches += 1
        if self._in_optimizer and not self._closure_depth:
            self._nested_s += now - t0
        if loss is not None:
            step.losses.append(loss)
        if self.mode == "backward":
            step.sources.add(BACKWARD_SOURCE)
            self._all_sources.add(BACKWARD_SOURCE)
        elif self.mode is None:
            self._undecided_backwards += 1
            if self._undecided_backwards >= self.BACKWARD_FALLBACK_CALLS:
                self._fall_back_to_backward(
                    now, f"{self._undecided_backwards} backward calls without an optimizer step"
                )

    def optimizer_start(self, key: Any) -> float:
        self._source_event(key, self._clock())
        self._in_optimizer = True
        self._nested_s = 0.0
        self._closure_depth = 0
        return self._clock()

    def closure_start(self) -> float:
        self._closure_depth += 1
        return self._clock()

    def closure_end(self, t0: float) -> None:
        self._closure_depth = max(self._closure_depth - 1, 0)
        if self._in_optimizer and not self._closure_depth:
            self._nested_s += self._clock() - t0

    def optimizer_end(self, key: Any, t0: float) -> None:
        self._in_optimizer = False
        self._closure_depth = 0
        nested, self._nested_s = self._nested_s, 0.0
        step = self._open
        closures, self._closure_calls = self._closure_calls, 0
        if step is None or self.stopped:
            return
        if closures <= 1:
            # The update alone: the closure and any forward/backward/data nested in the step
            # are taken out (one closure call, as Lightning makes: the step is that call's).
            step.optimizer_s += max(self._clock() - t0 - nested, 0.0)
        # With several closure steps (LBFGS) the call spans them all: no one step owns it.
        step.sources.add(key)  # _join, inlined: once per step
        self._all_sources.add(key)

    def closure_call(self, key: Any) -> None:
        """One evaluation of the closure passed to `optimizer.step(closure)` (LBFGS runs up
        to max_iter of them in one call): each is a forward and backward of its own, so
        each is a step; the repeat rule closes the previous one."""
        self._closure_calls += 1
        self._source_event(("closure", key), self._clock())
        step = self._open
        if step is not None and not self.stopped:
            step.closure_driven = True  # closed by the next closure call or step() only
            self._join(step, ("closure", key))

    def scaler_update(self, key: Any) -> None:
        self._source_event(key, self._clock())
        step = self._open
        if step is not None and not self.stopped:
            self._join(step, key)

    def save_time(self, elapsed: float) -> None:
        """A torch.save call took `elapsed` seconds (a checkpoint, in the open step)."""
        step = self._open
        if step is not None and not self.stopped:
            step.save_s += elapsed

    def zero_grad(self) -> None:
        """Gradients cleared after a backward without any optimizer step: manual updates."""
        if self.mode is None and self._undecided_backwards > 0 and not self.stopped:
            self._fall_back_to_backward(self._clock(), "gradients cleared without optimizer.step")

    def end_plan_after(self, steps: int) -> None:
        """End the plan once `steps` steps have closed (in-process A/B decides as it goes)."""
        self._plan_total = steps if self._plan_total is None else min(self._plan_total, steps)

    def finish(self) -> None:
        """The script ended (on its own, by crash or signal): keep the last step if whole."""
        if self.stopped or self._open is None:
            return
        now = self._clock()
        step = self._open
        if self.mode is None:
            if self._backward_total:
                self._set_mode("backward", "the script ended before any optimizer step")
                step.sources.add(BACKWARD_SOURCE)
            elif self._forward_total:
                self._set_mode("time", "the script ended before any backward pass")
        # Whole = it would have been closed by the next iteration's first event.
        keep = self._pending(step, now, "end")
        self._open = None
        if keep:
            self.steps_closed += 1
            self._listener.step_closed(step.close(now, "end"))

    # ------------------------------------------------------------------ rules

    def _source_event(self, key: Any, now: float) -> None:
        if self.stopped:
            self._stop_script()
            return
        if self.mode != "optimizer":
            note = None if self.mode is None else f"an optimizer step after {self.mode} steps"
            if self.mode is not None:
                self._all_sources.discard(BACKWARD_SOURCE)
                if self._open is not None:
                    self._open.sources.discard(BACKWARD_SOURCE)
            self._set_mode("optimizer", note)
        step = self._open
        if step is None:
            self._ensure_open(now)
        elif key in step.sources:
            self._close(now, "repeat")
            self._ensure_open(now)

    def _join(self, step: _OpenStep, key: Any) -> None:
        step.sources.add(key)
        self._all_sources.add(key)

    def _trigger(self, kind: str, now: float) -> None:
        if self.stopped:
            self._stop_script()
            return
        if self._first_event is None:
            self._first_event = now
        mode = self.mode
        if mode is None:
            self._maybe_choose_time_windows(now)
            mode = self.mode
        step = self._open
        if step is not None:
            # _pending, inlined: this runs on every forward, backward and batch.
            if mode == "time":
                if now - step.start < self._window:
                    return
            elif not step.sources or step.closure_driven:
                return  # (kind is never "end" here)
            elif step.data_driven:
                if kind != "data":
                    return
            elif not step.sources >= self._all_sources:
                return
            self._close(now, "time" if mode == "time" else kind)
        self._ensure_open(now)

    def _stop_script(self) -> None:
        """The plan is done: stop the script here, unless it is to run to its end."""
        if not self._run_to_end:
            raise PlanComplete

    def _pending(self, step: _OpenStep, now: float, kind: str) -> bool:
        if self.mode == "time":
            return now - step.start >= self._window
        if not step.sources:
            return False
        if step.closure_driven:
            return kind == "end"
        if step.data_driven:
            return kind in ("data", "end")
        return step.sources >= self._all_sources

    def _maybe_choose_time_windows(self, now: float) -> None:
        if (
            self._backward_total
            or self._optimizers_constructed
            or self._forward_total < self.TIME_MODE_MIN_FORWARDS
        ):
            return
        first = self._first_event if self._first_event is not None else now
        if now - first >= self.TIME_MODE_MIN_WINDOWS * self._window:
            self._set_mode("time", None)

    def _fall_back_to_backward(self, now: float, why: str) -> None:
        self._set_mode("backward", why)
        step = self._open
        if step is not None:
            step.sources.add(BACKWARD_SOURCE)
            self._all_sources.add(BACKWARD_SOURCE)
            self._close(now, "fallback")
        self._ensure_open(now)

    def _set_mode(self, mode: str | None, note: str | None) -> None:
        if mode == self.mode:
            return
        self.mode = mode
        if mode is not None:
            if self._leaving_time is not None:
                note = f"{note}; {self._leaving_time}" if note else self._leaving_time
                self._leaving_time = None
            self._listener.mode_changed(mode, note)

    def _close(self, now: float, closed_by: str) -> None:
        step = self._open
        if step is None:
            return
        self._open = None
        self.steps_closed += 1
        step.end = now  # step.close, inlined: once per step
        step.closed_by = closed_by
        step.losses = tuple(step.losses)
        self._listener.step_closed(step)

    def _ensure_open(self, now: float) -> None:
        if self._open is not None or self.stopped:
            return
        index = self.steps_closed
        if self._plan_total is not None and index >= self._plan_total:
            self.stopped = True
            self._listener.plan_finished()
            self._stop_script()
            return
        step = self._open = _OpenStep(index=index, start=now)
        self._listener.step_started(index)
        # The listener's bookkeeping (rows, progress, opening the profiler) happened between
        # the two steps: it belongs to neither.
        step.start = self._clock()
