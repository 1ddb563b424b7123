"""The child's instrumentation: step plan, step records, profiler window, observations.

`Probes` is the StepTracker's listener. It owns the plan (warm-up, timed, profiled), writes
steps.jsonl/progress.jsonl, opens the profiler and memory-history windows at the right step,
and gathers what the hooks saw (probes_hooks.py) into observations.json at the end.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfdoctor.analyze.frames import Location, UserCode
from perfdoctor.collect import observe
from perfdoctor.collect.comm_watch import CommWatch
from perfdoctor.collect.device_clock import DeviceStepClock
from perfdoctor.collect.flop_count import FLOPS_SKIPPED_IN_AB, StepFlopCounter
from perfdoctor.collect.memory_history import MemoryHistory
from perfdoctor.collect.nvtx import Nvtx
from perfdoctor.collect.probes_roots import RootFinder, _is_compiling_fn
from perfdoctor.collect.probes_steps import ClosedStep, StepTracker
from perfdoctor.collect.profiler_window import ProfilerWindow
from perfdoctor.collect.runtime import Runtime
from perfdoctor.collect.stack_sampler import StackSampler
from perfdoctor.collect.step_log import FLUSH_EVERY, NO_ARM, StepLog
from perfdoctor.collect.sync_watch import SyncCallWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EffectivePlan:
    """The spec's StepPlan as this child runs it (no profiled steps without a profiler).

    Phases in order: `warmup`, `timed`, then, with a profiler, one `profiler_warmup` step in
    which torch.profiler starts (StepPlan.profiler_warmup_steps) and the `profiled` steps.
    """

    warmup: int
    timed: int
    profiled: int

    @classmethod
    def from_spec(cls, spec: Any) -> EffectivePlan:
        plan = spec.plan
        if getattr(spec, "ab", None) is not None:
            # In-process A/B: the controller ends the plan; this only bounds it.
            return cls(max(plan.warmup_steps, 0), _ab_step_cap(spec.ab), 0)
        profiled = plan.profiled_steps if spec.profile else 0
        return cls(max(plan.warmup_steps, 0), max(plan.timed_steps, 0), max(profiled, 0))

    @property
    def timed_end(self) -> int:
        return self.warmup + self.timed

    @property
    def profiler_warmup(self) -> int:
        # As StepPlan.profiler_warmup_steps: the profiler's start-up stays out of timed steps.
        return 1 if self.profiled else 0

    @property
    def profiled_start(self) -> int:
        return self.timed_end + self.profiler_warmup

    @property
    def total(self) -> int:
        return self.profiled_start + self.profiled

    def phase(self, index: int) -> str:
        if index < self.warmup:
            return "warmup"
        if index < self.timed_end or self.profiled == 0:
            return "timed"
        if index < self.profiled_start:
            return "profiler_warmup"
        return "profiled"

    def is_phase_end(self, index: int) -> bool:
        return index + 1 in (self.warmup, self.timed_end, self.profiled_start, self.total)

    def to_json(self) -> dict[str, int]:
        return {
            "warmup_steps": self.warmup,
            "timed_steps": self.timed,
            "profiler_warmup_steps": self.profiler_warmup,
            "profiled_steps": self.profiled,
            "total_steps": self.total,
        }


def _ab_step_cap(design: Any) -> int:
    from perfdoctor.optimize.inprocess import MAX_BLOCK_STEPS

    block = (design.block_steps or MAX_BLOCK_STEPS) + design.settle_steps
    return len(design.arms) * (design.max_rounds + 1) * block


class Probes:
    def __init__(self, runtime: Runtime, torch: Any, user_code: UserCode, started_at: float):
        spec = runtime.spec
        run_dir = Path(spec.run_dir)
        self.runtime = runtime
        self.torch = torch
        self.user_code = user_code
        self.plan = EffectivePlan.from_spec(spec)
        self._set_plan_bounds()
        self.tracker = StepTracker(
            self,
            plan_total=self.plan.total if self.plan.total > 0 else None,
            time_window_s=spec.time_window_s,
            run_to_end=spec.run_to_end,
        )
        self.step_log = StepLog(run_dir, started_at)
        self.profiler: ProfilerWindow | None = None
        if self.plan.profiled:
            self.profiler = ProfilerWindow(
                run_dir, first_step=self.plan.profiled_start, steps=self.plan.profiled
            )
        self.memory = MemoryHistory(
            run_dir,
            requested=spec.record_memory_history,
            max_entries=spec.memory_history_max_entries,
        )
        self.nvtx, self.nvtx_info = Nvtx.create(spec.nvtx)
        self.sync_watch = SyncCallWatcher(torch, user_code)
        # Where the time between optimizer steps goes (a rollout's simulator): the baseline
        # with a profiler window samples it, variants do not.
        self.stacks = StackSampler(user_code) if self.plan.profiled else None
        self.comm = CommWatch(torch)
        # Not in an in-process A/B run: its verdicts come from ab.json's blocks, and the
        # counted step (every op through Python; torch._dynamo imported for the counter)
        # costs each of its processes, the continuations too, for a figure nobody reads.
        self.flops = StepFlopCounter(
            torch,
            self.plan.warmup,
            os.environ.get("PERFDOCTOR_FLOP_COUNT", "1") != "0",
            skipped=FLOPS_SKIPPED_IN_AB if getattr(spec, "ab", None) is not None else None,
        )
        # Steps up to the counted one go to the FLOP counter; after it, no call per step.
        self._flops_last = self.flops.index if self.flops.index is not None else -1
        self.roots = RootFinder(torch, self.tracker, user_code)
        self.roots.nvtx = self.nvtx
        self.cuda_used = False
        self.settings: dict[str, Any] | None = None
        self.stopped_by_perfdoctor = False
        self.plan_finished_at: int | None = None  # steps closed when the plan ended
        self.step_detection: str | None = None
        self.step_detection_note: str | None = None
        self._closure_calls = 0
        # what the hooks saw
        self.optimizers: list[Any] = []
        self.optimizer_locations: list[Location | None] = []
        self.optimizer_steps: dict[int, int] = {}
        self.loader_records: list[dict[str, Any]] = []
        self.scalers: list[dict[str, Any]] = []
        self.autocast: dict[str, Any] = {"used": False, "dtype": None, "device_type": None}
        self.autocast_dtypes: set[str] = set()
        # [True] while the per-step hooks observe; [False] once a plan that lets the script
        # run to its end is over: probes_hooks' wrappers then call straight through, where
        # going through the tracker to learn that it had stopped cost the null step ~36 us
        # a step (benchmarks/README.md, session 9).
        self.hooks_live = [True]
        self.zero_grad_calls = 0
        self.zero_grad_set_to_none: bool | None = None
        self.emit_nvtx = False
        self.any_data = False
        self.worker_iterators: weakref.WeakSet[Any] = weakref.WeakSet()
        self.user_profiler_kind: str | None = None
        self.location_counts: dict[str, Counter[tuple[str, int, str]]] = {}
        self._step_nvtx: Any = None
        self._rss_reader = RssReader()
        self._cpu_start: float | None = None  # this thread's CPU clock at the step's start
        # The CPU clock read as the last step closed, taken as the next step's start when
        # nothing but the step change ran in between (set at the end of step_closed): a
        # read is a system call (no vDSO for CPU clocks), microseconds on a virtual machine.
        self._cpu_carry: float | None = None
        # In-process A/B (collect/ab_switch.py): set by attach_ab when the spec asks for it.
        self.ab: Any = None
        # set by probes_hooks: GradScaler.scale(loss) -> remember which loss was scaled
        self.remember_scaled_loss: Any = lambda outputs, scaled: None

    # ------------------------------------------------------------------ setup

    def _set_plan_bounds(self) -> None:
        """The plan's phase boundaries as plain ints: read on every step, where the plan's
        properties cost a call each."""
        plan = self.plan
        self._warmup_end = plan.warmup
        self._timed_end = plan.timed_end
        self._timed_to_end = plan.profiled == 0  # no profiled window: timed to the end
        self._phase_ends = frozenset((plan.warmup, plan.timed_end, plan.profiled_start, plan.total))

    def install(self) -> None:
        from perfdoctor.collect import probes_hooks

        self.memory.setup()
        self.roots.start_discovery()
        probes_hooks.install(self)
        self.comm.install(_is_compiling_fn(self.torch))
        if self.stacks is not None:
            self.stacks.start()

    # ------------------------------------------------------------------ StepListener

    def attach_ab(self, applied: Any) -> None:
        """Switch the installed appliers between steps as the spec's A/B design asks."""
        from perfdoctor.collect.ab_switch import ABController

        design = self.runtime.spec.ab
        if design is None:
            return
        appliers = list(applied.appliers) if applied is not None else []
        if applied is not None:
            applied.controlled = True  # the controller verifies, in the on-blocks
        self.ab = ABController(
            design,
            appliers,
            self.tracker.end_plan_after,
            Path(self.runtime.spec.run_dir),
            self.plan.warmup,
            drain=self._drain_device,
        )
        self.runtime.on_finalize(self.ab.finish)

    def _drain_device(self) -> None:
        if self.cuda_used:
            self.torch.cuda.synchronize()

    def step_started(self, index: int) -> None:
        # Runs once per step: every part that only some runs need is behind a plain check,
        # so a CPU run's steady-state step makes no call it does not need (issue 30).
        if self.ab is not None:
            self.ab.step_started(index)
        if self._warmup_end <= index and (index < self._timed_end or self._timed_to_end):
            phase = "timed"  # self._phase, inlined
        else:
            phase = self.plan.phase(index)
        if not self.cuda_used and (phase == "warmup" or index % FLUSH_EVERY == 0):
            # Scripts move to CUDA before training; checking is ~3 us, so not every step.
            self.cuda_used = observe.cuda_in_use(self.torch)
        if self.cuda_used:
            self._mark_device_step(index)
            if phase == "profiled" and self.sync_watch.steps_watched == 0:
                self.sync_watch.install()  # (installed on CUDA runs only)
            self.sync_watch.step_started()
            self._memory_on_step_start(index)
        carry, self._cpu_carry = self._cpu_carry, None
        self._cpu_start = carry if carry is not None else time.thread_time()
        if self.stacks is not None:
            self.stacks.step_started(index)
            if phase in ("profiler_warmup", "profiled"):
                self.stacks.stop()  # the profiler records its own stacks; no handler in them
        if index == self._warmup_end and self.settings is None:
            self.settings = observe.torch_settings(self.torch)
        self.roots.track_shapes = phase != "warmup"
        if self.profiler is not None:
            self.profiler.on_step_start(index)
        if self.nvtx is not None:
            self._step_nvtx = self.nvtx.start(f"perfdoctor/step {index}")
        if index <= self._flops_last:
            self.flops.step_started(index)  # last, so the counter sees the step's ops only
        self.runtime.publish_step_start(index, phase)

    def _mark_device_step(self, index: int) -> None:
        clock = self.step_log.device_clock
        if clock is None:
            clock = self.step_log.device_clock = DeviceStepClock(self.torch)
        clock.mark(index)

    def _device_timing_info(self) -> dict[str, Any]:
        clock = self.step_log.device_clock
        return {
            "used": clock is not None and clock.failed is None,
            "failed": clock.failed if clock is not None else None,
        }

    def _memory_on_step_start(self, index: int) -> None:
        if not self.cuda_used:
            return
        if index < self.plan.warmup:
            self.memory.start(clear=False)
        elif index == self.plan.warmup and self.plan.profiled_start > index:
            self.memory.stop()
        if self.plan.profiled and index == self.plan.profiled_start:
            self.memory.stop()
            self.memory.start(clear=True)

    def step_closed(self, step: ClosedStep) -> None:
        index = step.index
        wall_s = step.end - step.start
        if index <= self._flops_last:
            self.flops.step_closed(index, wall_s)
        if self.nvtx is not None:
            self.nvtx.end(self._step_nvtx)
            self._step_nvtx = None
        if self._warmup_end <= index and (index < self._timed_end or self._timed_to_end):
            phase = "timed"  # self._phase, inlined
        else:
            phase = self.plan.phase(index)
        if phase == "timed" and self.profiler is not None:
            self.profiler.timed_step(wall_s)
        # The row's raw values, taken now; its dict is built when the rows are written.
        cpu_start = self._cpu_start
        cpu_now = time.thread_time()
        cuda = self.torch.cuda if self.cuda_used else None
        arm: Any = NO_ARM
        note = None
        if self.ab is not None:
            arm = self.ab.active_label()
            self.ab.step_closed(index, wall_s)
            note = self.ab.status_line() if self.ab.blocks else None
        step_log = self.step_log
        step_log.add_step(
            (
                step,
                phase,
                self._rss_reader.read(step.end),
                cpu_now - cpu_start if cpu_start is not None else None,
                self.comm.step_ms(step.start, step.end) if self.comm.seen else None,
                self.any_data,
                int(cuda.memory_allocated()) if cuda is not None else None,
                int(cuda.max_memory_allocated()) if cuda is not None else None,
                arm,
            ),
            note,  # its progress line comes from the same values
        )
        grad_use = self.roots.grad_use
        if grad_use.pending:
            grad_use.step_closed()
        if (index + 1) % FLUSH_EVERY == 0 or index + 1 in self._phase_ends:
            step_log.flush()  # (its CPU time is no step's: the next one reads the clock anew)
        elif self.ab is None and not self.cuda_used:
            # Between this close and the next start only the tracker's step change runs; an
            # A/B switch or CUDA bookkeeping there is no step's either.
            self._cpu_carry = cpu_now

    def plan_finished(self) -> None:
        self.plan_finished_at = self.tracker.steps_closed
        self.stopped_by_perfdoctor = not self.runtime.spec.run_to_end
        if not self.stopped_by_perfdoctor:
            # The script runs on unobserved: the per-forward hooks go now; the patched calls
            # pass straight through, and the optimizer hooks only count steps.
            self.roots.remove_hooks()
            self.hooks_live[0] = False
        self.sync_watch.uninstall()
        if self.stacks is not None:
            self.stacks.stop()
        self.flops.stop("the plan ended")
        if self.memory.info.get("recorded") and self.plan.profiled:
            self.memory.dump("profiled window")
        self.memory.stop()
        if self.profiler is not None:
            self.profiler.finish()
            dropped = self.profiler.info.get("dropped_why")
            if dropped:
                self.runtime.warn(f"profiler window cut short: {dropped}")
        self.step_log.flush()

    def mode_changed(self, mode: str, note: str | None) -> None:
        previous, self.step_detection = self.step_detection, mode
        if note:
            self.step_detection_note = note
        if previous is not None:
            self.runtime.warn(f"step detection changed from {previous} to {mode}: {note}")
        if mode in ("backward", "time") and not self.roots.resolved:
            self.publish_roots([])

    # ------------------------------------------------------------------ from the hooks

    def optimizer_constructed(self, opt: Any, location: Location | None) -> None:
        self.optimizers.append(opt)
        self.optimizer_locations.append(location)
        self.tracker.optimizer_constructed()
        if self.runtime.roots_known:
            self.runtime.optimizers.append(opt)

    def optimizer_stepped(self, opt: Any) -> None:
        key = id(opt)
        self.optimizer_steps[key] = self.optimizer_steps.get(key, 0) + 1
        if not self.roots.resolved:
            self.publish_roots(list(self.optimizers))

    def closure_steps_seen(self, opt: Any) -> None:
        """A closure call of optimizer.step(closure): say how steps are counted, and pick
        the roots once the first closure's forward was seen (the optimizer's own post-hook
        may come only after the whole plan, or never)."""
        self._closure_calls += 1
        if self._closure_calls == 1:
            self.step_detection_note = (
                f"{type(opt).__name__}.step(closure) evaluates its closure several times per "
                "call: each closure call (one forward and backward) is counted as a step"
            )
        elif not self.roots.resolved:
            self.publish_roots(list(self.optimizers))

    def publish_roots(self, optimizers: list[Any]) -> None:
        roots = self.roots.resolve(optimizers)
        if roots and self.roots.found_on_stack:
            self.runtime.warn(
                "the root model's forward was not seen (compiled in place, or called through "
                ".forward()); roots were taken from the script's variables and forward time "
                "is not measured"
            )
        if not roots:
            self.runtime.warn(
                "no root model found: no nn.Module holding trained parameters was called "
                "through module(...) at the top level; forward time is not measured"
            )
        self.runtime.publish_roots(list(roots), list(self.optimizers))

    def dataloader_constructed(
        self, loader: Any, explicit: list[str], location: Location | None
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "loader": loader,
            "explicit": explicit,
            "location": location,
            "batches": 0,
            "steps_fed": 0,
            "last_step": -1,
        }
        self.loader_records.append(record)
        self.runtime.dataloaders.append(loader)
        return record

    def scaler_constructed(self, scaler: Any, location: Location | None) -> None:
        self.scalers.append(
            {"enabled": bool(getattr(scaler, "_enabled", True)), "location": location}
        )

    def autocast_entered(self, device_type: Any, dtype: Any) -> None:
        name = str(dtype).replace("torch.", "") if dtype is not None else None
        if name is not None and name not in self.autocast_dtypes:
            self.autocast_dtypes.add(name)
            self.autocast.update({"used": True, "dtype": name, "device_type": str(device_type)})
        elif not self.autocast["used"]:
            self.autocast.update({"used": True, "device_type": str(device_type)})

    def zero_grad_called(self, set_to_none: bool) -> None:
        self.zero_grad_calls += 1
        if self.zero_grad_set_to_none is None or not set_to_none:
            self.zero_grad_set_to_none = bool(set_to_none)
        if self.tracker.mode is None:  # it only decides while no step signal is chosen
            self.tracker.zero_grad()

    def locate(self, topic: str, frame: Any) -> None:
        """Count a user call site for observations["locations"][topic]."""
        key = self.user_code.caller_key(frame)
        if key is not None:
            counts = self.location_counts.setdefault(topic, Counter())
            counts[key] += 1

    def _locations(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for topic, counts in self.location_counts.items():
            rows = []
            for key, count in counts.most_common(10):
                loc = self.user_code.location(*key)
                loc["count"] = count
                rows.append(loc)
            out[topic] = rows
        return out

    def user_profiler_started(self, kind: str) -> None:
        if self.profiler is not None:
            self.profiler.back_off(f"the script started its own {kind}")
        if self.user_profiler_kind is None:
            self.user_profiler_kind = kind

    # ------------------------------------------------------------------ the end

    def finish(self, *, script_ended_normally: bool) -> None:
        """Close the last step, windows and files. Safe to call once, from `finally`."""
        try:
            self.tracker.finish()
        except BaseException:  # PlanComplete cannot come from finish; be sure anyway
            log.debug("tracker.finish failed", exc_info=True)
        self.roots.grad_use.finish(script_ended_normally=script_ended_normally)
        self.flops.stop("the script ended")
        self.sync_watch.uninstall()
        if self.stacks is not None:
            self.stacks.stop()
        if self.profiler is not None:
            self.profiler.close()
        if self.memory.recording:
            self.memory.dump("end of run")
        self.memory.stop()
        if self.settings is None:
            self.settings = observe.torch_settings(self.torch)
        self.step_log.close()
        self.roots.remove_hooks()

    def shutdown_workers(self) -> None:
        """End DataLoader worker processes now rather than at interpreter exit."""
        for loader in self.runtime.dataloaders:
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None:
                self.worker_iterators.add(iterator)
        for iterator in list(self.worker_iterators):
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:
                    log.debug("worker shutdown failed", exc_info=True)

    def observations(self) -> dict[str, Any]:
        torch = self.torch
        cpu = observe.cpu_info()
        obs: dict[str, Any] = {
            "step_detection": self.step_detection,
            # The steps with a row, not the tracker's count: a SIGTERM between a step's close
            # and its row would otherwise count a step that steps.jsonl does not have.
            "steps_seen": self.step_log.rows_added,
            "plan": self.plan.to_json(),
            "plan_complete": self.plan.total > 0 and self.tracker.steps_closed >= self.plan.total,
            "stopped_by_perfdoctor": self.stopped_by_perfdoctor,
            "torch": self.settings or observe.torch_settings(torch),
            "cpu": cpu,
            "device": observe.device_info(torch, cpu),
            "dataloaders": [self._describe_loader(r) for r in self.loader_records],
            "optimizers": [
                self._describe_optimizer(opt, loc)
                for opt, loc in zip(self.optimizers, self.optimizer_locations, strict=True)
            ],
            "roots": [observe.describe_root(root, torch) for root in self.roots.roots],
            "autocast": {
                **self.autocast,
                "dtypes": sorted(self.autocast_dtypes),
                "grad_scaler": bool(self.scalers),
                "grad_scaler_enabled": any(s["enabled"] for s in self.scalers),
            },
            "zero_grad": {"calls": self.zero_grad_calls, "set_to_none": self.zero_grad_set_to_none},
            "forwards": {
                "root_calls": self.roots.root_calls,
                "hooks": self.roots.hook_mode,
                **self.roots.grad_use.summary(),
            },
            "profiler": self._profiler_info(),
            "dist": observe.dist_info(torch),
            "communication": self.comm.info(),
            "flop_count": self.flops.info,
            "compile": observe.compile_info(),
            "inputs": {
                "distinct_shapes_after_warmup": self.roots.distinct_shapes(),
                "distinct_shapes_per_root": [len(x) for x in self.roots.shapes.values()],
            },
            "cuda_memory": observe.cuda_memory(torch),
            "memory_history": self.memory.info,
            "nvtx": self.nvtx_info,
            "device_step_timing": self._device_timing_info(),
            "host_sync_calls": (
                self.sync_watch.summary() if self.sync_watch.steps_watched else None
            ),
        }
        if self.location_counts:
            obs["locations"] = self._locations()
        stacks = self.stacks.summary() if self.stacks is not None else None
        if stacks:
            obs["step_stacks"] = stacks
        if self.step_detection_note:
            obs["step_detection_note"] = self.step_detection_note
        if self._closure_calls:
            obs["closure_calls"] = self._closure_calls
        if self.step_log.nonfinite_losses:
            obs["nonfinite_losses"] = self.step_log.nonfinite_losses
        return obs

    def _describe_loader(self, record: dict[str, Any]) -> dict[str, Any]:
        info = observe.describe_dataloader(record["loader"], self.torch)
        info["explicit"] = record["explicit"]
        info["location"] = record["location"]
        info["batches"] = record["batches"]
        info["steps_fed"] = record["steps_fed"]
        return info

    def _describe_optimizer(self, opt: Any, location: Location | None) -> dict[str, Any]:
        info = observe.describe_optimizer(opt, self.torch)
        info["steps"] = self.optimizer_steps.get(id(opt), 0)
        info["location"] = location
        return info

    def _profiler_info(self) -> dict[str, Any]:
        base: dict[str, Any] = (
            dict(self.profiler.info)
            if self.profiler is not None
            else {"user_profiler": False, "started": False, "trace_files": []}
        )
        base["requested"] = self.profiler is not None
        if self.user_profiler_kind is not None:
            base["user_profiler"] = True
            base["user_profiler_kind"] = self.user_profiler_kind
        base["emit_nvtx"] = self.emit_nvtx
        return base

    # ------------------------------------------------------------------ rows

    def _rss(self) -> int | None:
        return self._rss_reader.read()


class RssReader:
    """Resident set size at a step's end: /proc/self/statm read through a kept descriptor
    where there is one, psutil elsewhere. Each read is a system call (microseconds on a
    virtual machine, where a null step takes ~400 us), so at most one every
    RSS_MIN_INTERVAL_S: every step of a loop whose steps take a millisecond or more, every
    few steps of a faster one (the rows between have none; the growth fit and the peak read
    what there is)."""

    RSS_MIN_INTERVAL_S = 0.001

    def __init__(self) -> None:
        self._fd: int | None = None
        self._page = 0
        self._process: Any = None
        self._failed = False
        self._last_read = float("-inf")

    def read(self, now: float | None = None) -> int | None:
        """`now` (perf_counter): skip the read within RSS_MIN_INTERVAL_S of the last one."""
        if self._failed:
            return None
        if now is not None:
            if now - self._last_read < self.RSS_MIN_INTERVAL_S:
                return None
            self._last_read = now
        try:
            if self._fd is not None:
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            if self._process is not None:
                return int(self._process.memory_info().rss)
            return self._open()
        except (OSError, ValueError, IndexError):
            self._failed = True
            return None

    def _open(self) -> int | None:
        if hasattr(os, "pread") and os.path.exists("/proc/self/statm"):
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            self._page = os.sysconf("SC_PAGE_SIZE")
        else:
            try:
                import psutil

                self._process = psutil.Process()
            except Exception:
                self._failed = True
                return None
        return self.read()
