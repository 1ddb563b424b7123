"""Where the whole loop's wall time went, and whether the timed steps stand for it.

The timed window is a handful of consecutive steps. A loop that does heavy work between some
optimizer steps (a PPO rollout before every 40 minibatch steps, evaluation every N steps, a
checkpoint, a generation callback) puts that work into a few long steps, and when none of
them is timed the step figures describe only the cheap steps in between.

Steps are contiguous (collect/probes_steps.py opens a step where the previous one closed), so
the steps of a run cover its loop from the first step's start to the last one's end. Each
step row says how much of it went to root forwards of a model in eval mode, to root forwards
under no_grad in train mode, and to torch.save (collect/loop_probes.py); the rest of a long
step's excess is the script's own code between steps (an environment, logging, callbacks).

Pure: reads a RunRecord's steps and progress rows.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.step_code import CODE_LINES_SHOWN, CodeShare, long_step_code
from perfdoctor.analyze.step_costs import compile_ms_by_step, named_costs, timed_excess
from perfdoctor.model import StepRecord
from perfdoctor.run_schema import ProgressRow

# A step this many times the timed median is a long step: the loop did something else in it.
# 3x sits above the step-to-step spread of well-tuned CPU loops (p90/p50 1.02-1.38,
# rules/threshold_measurements.md) and step-jitter's 2x warning, so ordinary jitter is not
# called work; a PPO rollout was 25-28x a minibatch step (benchmarks/README.md, issue 24).
LONG_STEP_FACTOR = 3.0
# ... and at least this much longer (ms): sub-millisecond steps vary by more than 3x.
LONG_STEP_MIN_EXCESS_MS = 2.0
# The long loop-work steps are flagged when their excess over a timed step is at least this
# share of the loop's wall time: the step figures (medians of the timed steps, which leave out
# a long step even when it was timed) then miss a fifth of what the loop costs, enough to
# change which cost leads.
LONG_SHARE_FLAG = 0.2
# A long step is the loop's own work when named costs (eval/no_grad forwards, torch.save) are
# at least this share of its excess: a step that is long for no named reason is jitter as
# often as not on a busy machine (a preempted 0.6 ms step reads 5-50 ms at load 9 on 2 cores,
# measured here), so such steps are counted apart (`unexplained`) and never raise the flag.
# Jitter steps of a training loop hold no named cost at all, while an environment-heavy
# rollout's policy forwards are still a few percent of it: 2%.
LOOP_WORK_NAMED_SHARE = 0.02
# The median timed step this many times the fast pace (the fastest quarter's mean): the load
# stretched the short steps, and the long steps' share is also judged at the fast pace. Well-
# tuned CPU loops keep p50 within 1.4x of their fastest steps (p90/p50 1.02-1.38,
# rules/threshold_measurements.md); a policy-gradient update at load 9 read 5x.
LOAD_PACE_RATIO = 2.0
# A CPU run's median timed step whose wall time (less its data wait) is this many times its
# CPU time waited for the cores most of the time: the machine was loaded. A CPU-bound loop
# on a quiet machine keeps its stepping thread busy (ratio near 1); a policy-gradient update
# at load 10 on 2 cores read 280 ms of wall for 34 ms of CPU.
LOAD_STRETCH_FLAG = 2.0
# Step 0 is also where one-off costs fall (lazy initialisation, first allocations): its excess
# counts as loop work when the named costs (eval/no_grad forwards, torch.save) are at least
# this share of it, or when a later long step holds the same kinds of cost (it recurs). A
# rollout's environment is unnamed "other" time: the first step of CleanRL's
# ppo_continuous_action.py and of Lightning Fabric's PPO example held 20% no_grad forwards
# (60 of 297 ms, 19 of 96 ms; quiet 2-core machine, 2026-11-28) with no second rollout in a
# 25-step run, while a training script's start-up step names nothing: a tenth.
FIRST_STEP_NAMED_SHARE = 0.10

COST_LABELS = {
    "compile_ms": "torch.compile compiling (dynamo and inductor, compile.json)",
    "eval_forward_ms": "evaluation (forwards of a model in eval mode)",
    "nograd_forward_ms": "no_grad forwards in train mode (rollouts, generation)",
    "save_ms": "checkpointing (torch.save)",
    "other_ms": "other code between optimizer steps (environment, logging, callbacks)",
    "starting_process_ms": "the starting process's forwards, no training (a test loop)",
}


@dataclass(frozen=True)
class LongStep:
    index: int
    phase: str
    wall_ms: float
    excess_ms: float  # over the timed median
    costs_ms: dict[str, float]  # COST_LABELS keys -> ms of the excess


@dataclass(frozen=True)
class LoopAccount:
    loop_ms: float  # every step, first to last
    steps: int
    setup_ms: float | None  # before the first step (start-up, imports, data and model set-up)
    timed_first: int | None
    timed_last: int | None
    timed_step_ms_p50: float | None
    timed_ms: float
    loop_step_ms_mean: float  # the loop's wall time per step
    long_steps: tuple[LongStep, ...]
    untimed_long_ms: float  # excess of the long loop-work steps outside the timed window
    long_ms: float  # excess of every long loop-work step, timed or not
    period: int | None  # steps between long loop-work steps, when two or more were seen
    costs_ms: dict[str, float]  # named costs over the whole loop (COST_LABELS keys)
    representative: bool
    first_step_startup_ms: float  # step 0's excess that is one-off start-up, not loop work
    unexplained_long_steps: int = 0  # long for no named reason (jitter, or unnamed code)
    # The long work was seen to come back (two long steps, or one after the first step):
    # without that, a heavy first step (nanoGPT's estimate_loss at iteration 0, a first
    # rollout) may recur every 40 steps or every 2,000, and its share of the loop is unknown.
    recurs: bool = True
    # What step 0's one-off start-up excess held (COST_LABELS keys): a cold torch.compile
    # is named here, not left as "other code".
    startup_costs_ms: dict[str, float] = field(default_factory=dict)
    # The long steps' share of the loop with the steps between them at the pace of the
    # fastest quarter of the timed steps (load_robust_share); None when that pace is the
    # median's (a quiet run) or there are no long steps.
    long_share_at_fast_pace: float | None = None
    # The user's functions the main thread was in during the long steps (the stack sampler,
    # collect/stack_sampler.py), most samples first; () when not sampled.
    long_code: tuple[CodeShare, ...] = ()
    # Median timed step's wall time (less its data wait) over its CPU time, when the load
    # stretched it LOAD_STRETCH_FLAG times or more (load_stretch); None on a quiet machine.
    load_stretch: float | None = None

    @property
    def timed_share(self) -> float | None:
        """The timed step's share of the loop's time per step (1.0: it stands for it)."""
        if not self.timed_step_ms_p50 or self.loop_step_ms_mean <= 0:
            return None
        return min(1.0, self.timed_step_ms_p50 / self.loop_step_ms_mean)

    @property
    def long_share(self) -> float:
        return self.long_ms / self.loop_ms if self.loop_ms > 0 else 0.0

    @property
    def untimed_long_share(self) -> float:
        return self.untimed_long_ms / self.loop_ms if self.loop_ms > 0 else 0.0


def counted_optimizer_steps(record: RunRecord) -> int:
    """optimizer.step calls that finished, over the whole run (a GAN's two optimizers count
    twice); 0 when the child saw no optimizer at all (backward or time-window steps), and the
    steps themselves only for a run that recorded no optimizer observations."""
    optimizers = record.observed.optimizers
    if optimizers is None:
        return len(record.steps)
    return sum(o.steps for o in optimizers if o.steps is not None)


def _with_code(account: LoopAccount | None, record: object) -> LoopAccount | None:
    observed = getattr(record, "observed", None)
    stacks = getattr(observed, "step_stacks", None)
    rows = getattr(stacks, "rows", None)
    if account is None or not rows or not account.long_steps:
        return account
    code = long_step_code(rows, [ls.index for ls in account.long_steps])
    return replace(account, long_code=code) if code else account


def loop_account(record: RunRecord) -> LoopAccount | None:
    """The loop account of a run; None without timed steps to compare with."""
    account = _with_code(
        account_steps(record.steps, record.progress, compile_ms_by_step(record)), record
    )
    starter = record.observations.get("starting_process")
    if account is None or not isinstance(starter, dict):
        return account
    wall = starter.get("steps_wall_ms")
    if starter.get("step_detection") == "time" and isinstance(wall, (int, float)) and wall > 0:
        # A Hogwild parent's test loop: forwards outside training, in another process.
        costs = {**account.costs_ms, "starting_process_ms": float(wall)}
        return replace(account, costs_ms=costs)
    return account


def _excess_costs(
    step: StepRecord, excess: float, compile_ms: Mapping[int, float] | None = None
) -> dict[str, float]:
    """The step's excess over a timed step, split into the named costs and the rest."""
    costs = {k: min(v, excess) for k, v in named_costs(step, compile_ms).items()}
    named = sum(costs.values())
    if named > excess:  # named costs a timed step also has: scale them into the excess
        costs = {k: v * excess / named for k, v in costs.items()}
        named = excess
    costs["other_ms"] = max(excess - named, 0.0)
    return {k: v for k, v in costs.items() if v > 0}


def _one_off(long_steps: Sequence[LongStep]) -> bool:
    """Whether the first step's excess is one-off start-up rather than the loop's own work."""
    first, later = long_steps[0], long_steps[1:]
    # Compiling is start-up work unless a later long step compiles too (a recompile, an
    # eval graph): then it is a kind of work the loop repeats.
    if "compile_ms" in first.costs_ms and any("compile_ms" in ls.costs_ms for ls in later):
        return False
    kinds = {k for k in first.costs_ms if k not in ("other_ms", "compile_ms")}
    named = sum(first.costs_ms.get(k, 0.0) for k in kinds)
    if named >= FIRST_STEP_NAMED_SHARE * first.excess_ms:
        return False
    return not any(kinds and kinds <= set(ls.costs_ms) for ls in later)


def setup_ms(steps: Sequence[StepRecord], progress: Sequence[ProgressRow]) -> float | None:
    """Time from the run's start to the first step's start, from progress.jsonl."""
    first = min(steps, key=lambda s: s.index, default=None)
    row = next((p for p in progress if first is not None and p.step == first.index), None)
    if first is None or row is None:
        return None
    return max(row.t * 1000.0 - first.wall_ms, 0.0)


def fast_pace_ms(timed: Sequence[StepRecord]) -> float | None:
    """Mean of the fastest quarter of the timed steps (at least one): the pace of a step the
    machine's load disturbed least."""
    walls = sorted(s.wall_ms for s in timed if s.wall_ms > 0)
    if not walls:
        return None
    quarter = walls[: max(1, len(walls) // 4)]
    return sum(quarter) / len(quarter)


def load_robust_share(
    steps: Sequence[StepRecord], long_steps: Sequence[LongStep], typical: float
) -> float | None:
    """The long steps' share of the loop with every other step at the fast pace.

    Other processes' load stretches short steps of small torch ops far more than the
    Python of a rollout: two intra-op threads wait on each other whenever one is
    descheduled (a 0.88 ms policy-gradient update read 200 ms at load 9 on 2 cores, its
    53 ms rollout 690 ms). The long steps' measured share then shrinks below the flag
    although the loop is unchanged. With the steps between them at the fast pace (what
    they cost when the machine let them run) the share stands for the script, not for the
    load. None when the fast pace is within LOAD_PACE_RATIO of the median (no load to
    correct for) or there is no long step."""
    timed = [s for s in steps if s.phase == "timed"]
    fast = fast_pace_ms(timed)
    if not long_steps or fast is None or typical < LOAD_PACE_RATIO * fast:
        return None
    long_excess = sum(max(ls.wall_ms - fast, 0.0) for ls in long_steps)
    total = long_excess + fast * len(steps)  # every step at the pace, plus the long excess
    return long_excess / total if total > 0 else None


def _median_cpu(timed: Sequence[StepRecord]) -> float | None:
    cpu = [s.cpu_ms for s in timed if s.cpu_ms is not None]
    return statistics.median(cpu) if len(cpu) == len(timed) and cpu else None


def load_stretch(timed: Sequence[StepRecord]) -> float | None:
    """How many times the median timed step's wall time (less its data wait) exceeds its CPU
    time on the thread that ran it, when that is LOAD_STRETCH_FLAG or more; None otherwise,
    and on CUDA runs (the host waits for the GPU there by design)."""
    if not timed or any(s.device_ms is not None for s in timed):
        return None
    cpu = _median_cpu(timed)
    if not cpu or cpu <= 0:
        return None
    busy = statistics.median(max(s.wall_ms - (s.data_wait_ms or 0.0), 0.0) for s in timed)
    ratio = busy / cpu
    return ratio if ratio >= LOAD_STRETCH_FLAG else None


def cpu_share(
    steps: Sequence[StepRecord], long_steps: Sequence[LongStep], typical_cpu: float | None
) -> float | None:
    """The long steps' share of the loop's CPU time on the stepping thread, counted as
    their excess over a typical step's: what the loop costs when no other process takes
    the cores. None without CPU times for every step."""
    if typical_cpu is None or not long_steps:
        return None
    cpu = {s.index: s.cpu_ms for s in steps}
    if any(v is None for v in cpu.values()):
        return None
    total = sum(v for v in cpu.values() if v is not None)
    excess = sum(max((cpu.get(ls.index) or 0.0) - typical_cpu, 0.0) for ls in long_steps)
    return excess / total if total > 0 else None


def account_steps(
    all_steps: Sequence[StepRecord],
    progress: Sequence[ProgressRow] = (),
    compile_ms: Mapping[int, float] | None = None,
) -> LoopAccount | None:
    """The loop account of these steps (progress rows: for the time before the first;
    compile_ms: compile time per step index, compile_ms_by_step)."""
    steps = sorted(all_steps, key=lambda s: s.index)
    timed = [s for s in steps if s.phase == "timed"]
    if not timed or len(steps) < 2:
        return None
    typical = statistics.median(s.wall_ms for s in timed)
    loop_ms = sum(s.wall_ms for s in steps)
    stretch = load_stretch(timed)
    typical_cpu = _median_cpu(timed) if stretch is not None else None
    long_steps: list[LongStep] = []
    unexplained: list[LongStep] = []
    for s in steps:
        excess = s.wall_ms - typical
        long_wall = s.wall_ms >= LONG_STEP_FACTOR * typical and excess >= LONG_STEP_MIN_EXCESS_MS
        # Under load a short step's wall time stretches far more than its CPU time: a step
        # long in CPU time is long work however the load stretched the others.
        long_cpu = (
            typical_cpu is not None
            and s.cpu_ms is not None
            and s.cpu_ms >= LONG_STEP_FACTOR * typical_cpu
            and s.cpu_ms - typical_cpu >= LONG_STEP_MIN_EXCESS_MS
            and excess > 0
        )
        if not (long_wall or long_cpu):
            continue
        found = LongStep(s.index, s.phase, s.wall_ms, excess, _excess_costs(s, excess, compile_ms))
        named = sum(v for k, v in found.costs_ms.items() if k != "other_ms")
        work = named >= LOOP_WORK_NAMED_SHARE * excess or s.index == steps[0].index
        (long_steps if work else unexplained).append(found)
    startup = 0.0
    startup_costs: dict[str, float] = {}
    if long_steps and long_steps[0].index == steps[0].index and _one_off(long_steps):
        first = long_steps.pop(0)  # start-up: not a cost the loop pays again
        startup, startup_costs = first.excess_ms, dict(first.costs_ms)
    untimed = sum(ls.excess_ms for ls in long_steps if ls.phase != "timed")
    long_ms = sum(ls.excess_ms for ls in long_steps)
    indices = [ls.index for ls in long_steps]
    gaps = [b - a for a, b in itertools.pairwise(indices)]
    period = int(statistics.median(gaps)) if gaps else None
    totals: dict[str, float] = {}
    for s in steps:
        for key, value in named_costs(s, compile_ms).items():
            if key == "compile_ms" and s.index == steps[0].index and startup:
                continue  # step 0's compile is start-up, listed with it
            if value > 0:
                totals[key] = totals.get(key, 0.0) + value
    other = sum(ls.costs_ms.get("other_ms", 0.0) for ls in long_steps)
    if other > 0:
        totals["other_ms"] = other
    # Per step over the loop, without the one-off start-up: what the loop costs each step.
    per_step = (loop_ms - startup) / len(steps)
    robust = max(
        (
            v
            for v in (
                load_robust_share(steps, long_steps, typical),
                cpu_share(steps, long_steps, typical_cpu),
            )
            if v is not None
        ),
        default=None,
    )
    # Long work that comes back at a fixed period on a loaded machine is the loop's, whatever
    # share the load leaves it: the share is then a floor, said as such.
    periodic_under_load = stretch is not None and period is not None and len(long_steps) >= 2
    representative = (
        long_ms / loop_ms < LONG_SHARE_FLAG
        and (robust is None or robust < LONG_SHARE_FLAG)
        and not periodic_under_load
    )
    return LoopAccount(
        loop_ms=loop_ms,
        steps=len(steps),
        setup_ms=setup_ms(steps, progress),
        timed_first=timed[0].index,
        timed_last=timed[-1].index,
        timed_step_ms_p50=typical,
        timed_ms=sum(s.wall_ms for s in timed),
        loop_step_ms_mean=per_step,
        long_steps=tuple(long_steps),
        untimed_long_ms=untimed,
        long_ms=long_ms,
        period=period,
        costs_ms=totals,
        representative=representative,
        recurs=len(long_steps) >= 2 or any(ls.index != steps[0].index for ls in long_steps),
        first_step_startup_ms=startup,
        unexplained_long_steps=len(unexplained),
        startup_costs_ms=startup_costs,
        long_share_at_fast_pace=robust,
        load_stretch=stretch,
    )


def loop_warning(account: LoopAccount | None) -> str | None:
    """One line for the report's warnings when the step figures do not stand for the loop."""
    if account is None or account.representative:
        return None
    longest = max(account.long_steps, key=lambda ls: ls.excess_ms)
    lead = max(longest.costs_ms.items(), key=lambda kv: kv[1])
    where = ", ".join(str(ls.index) for ls in account.long_steps[:6])
    timed = [str(ls.index) for ls in account.long_steps if ls.phase == "timed"]
    typical = max(account.timed_step_ms_p50 or 1.0, 1e-9)
    text = (
        f"the step figures (medians of steps {account.timed_first}-{account.timed_last}, "
        f"{typical:.1f} ms) do not represent the loop: step(s) {where} took up to "
        f"{longest.wall_ms:,.0f} ms ({longest.wall_ms / typical:.0f}x), mostly "
        f"{COST_LABELS[lead[0]]}; they hold {account.long_share:.0%} of the loop's wall time"
    )
    if account.long_code:
        text += "; the main thread was in " + ", ".join(c.describe() for c in account.long_code)
    if timed:
        text += f" (step {', '.join(timed)} was timed, but a median leaves a rare long step out)"
    fast = account.long_share_at_fast_pace
    if fast is not None and fast > account.long_share:
        text += (
            f" ({fast:.0%} at the pace of the fastest timed steps or of the CPU time: the "
            "machine's load stretched the short steps more than the long ones)"
        )
    if account.load_stretch is not None:
        text += (
            f"; the machine was loaded (a timed step took {account.load_stretch:.0f}x its CPU "
            "time), so on a quiet one the long steps hold more of the loop than this"
        )
    share = account.timed_share
    if share is not None:
        text += f", and a timed step is {share:.0%} of the loop's time per step"
    if account.period:
        text += (
            f"; they recur every {account.period} steps: time a whole cycle with "
            f"--steps {account.period} or more and judge its mean"
        )
    elif not account.recurs:
        text += (
            f"; it did not come back within the {account.steps} steps run, so whether it is a "
            "one-off or part of every cycle (a rollout before each update) is not known: time "
            "more steps (--steps) to see how often it recurs"
        )
    else:
        text += "; time more steps (--steps) to see how often they recur"
    return text


def loop_summary(account: LoopAccount | None) -> dict[str, object]:
    """The account as plain JSON values (Report.loop); {} for None."""
    if account is None:
        return {}
    return {
        "loop_ms": round(account.loop_ms, 3),
        "steps": account.steps,
        "setup_ms": round(account.setup_ms, 3) if account.setup_ms is not None else None,
        "timed_steps": [account.timed_first, account.timed_last],
        "timed_step_ms_p50": account.timed_step_ms_p50,
        "loop_step_ms_mean": round(account.loop_step_ms_mean, 4),
        "timed_share": account.timed_share,
        "first_step_startup_ms": round(account.first_step_startup_ms, 3),
        "long_steps": [
            {
                "index": ls.index,
                "phase": ls.phase,
                "wall_ms": ls.wall_ms,
                "excess_ms": round(ls.excess_ms, 4),
                "costs_ms": {k: round(v, 4) for k, v in ls.costs_ms.items()},
            }
            for ls in account.long_steps
        ],
        "untimed_long_ms": round(account.untimed_long_ms, 4),
        "untimed_long_share": round(account.untimed_long_share, 4),
        "long_ms": round(account.long_ms, 4),
        "long_share": round(account.long_share, 4),
        "period": account.period,
        "costs_ms": {k: round(v, 4) for k, v in account.costs_ms.items()},
        "representative": account.representative,
        "recurs": account.recurs,
        "unexplained_long_steps": account.unexplained_long_steps,
        "startup_costs_ms": {k: round(v, 4) for k, v in account.startup_costs_ms.items()},
        "long_code": [
            {
                "file": c.file,
                "function": c.function,
                "first_line": c.first_line,
                "lines": list(c.lines[:CODE_LINES_SHOWN]),
                "samples": c.samples,
                "share": round(c.share, 4),
                "text": c.describe(),
            }
            for c in account.long_code
        ],
        "long_share_at_fast_pace": (
            round(account.long_share_at_fast_pace, 4)
            if account.long_share_at_fast_pace is not None
            else None
        ),
        "load_stretch": round(account.load_stretch, 2) if account.load_stretch else None,
        "warning": loop_warning(account),
    }


def loop_facts(record: object) -> dict[str, object]:
    """The loop account as flat facts (analyze/fact_catalog.py); {} without an account."""
    steps = getattr(record, "steps", None)
    if not steps:
        return {}
    account = _with_code(
        account_steps(steps, getattr(record, "progress", ()) or (), compile_ms_by_step(record)),
        record,
    )
    if account is None:
        return {}
    excess = timed_excess(steps, compile_ms_by_step(record))
    lead = excess.lead_named() if excess is not None else None
    costs: dict[str, float] = {}
    for ls in account.long_steps:
        for key, value in ls.costs_ms.items():
            costs[key] = costs.get(key, 0.0) + value
    main = max(costs, key=lambda k: costs[k]) if costs else None
    return {
        "loop_long_step_frac": account.long_share,
        "loop_long_step_frac_fast_pace": account.long_share_at_fast_pace,
        "loop_load_stretch": account.load_stretch,
        "loop_long_step_periodic_under_load": (
            account.load_stretch is not None and account.period is not None
        )
        if account.long_steps
        else None,
        "loop_startup_compile_ms": account.startup_costs_ms.get("compile_ms"),
        "loop_long_step_code": (
            "; ".join(c.describe() for c in account.long_code[:2]) if account.long_code else None
        ),
        "jitter_excess_data_frac": excess.share("data_wait_ms") if excess else None,
        "jitter_excess_other_frac": excess.share("other_ms") if excess else None,
        "jitter_excess_cause": lead[0].removesuffix("_ms") if lead else None,
        "jitter_excess_cause_frac": lead[1] if lead else None,
        "jitter_longest_step_index": excess.longest_index if excess else None,
        "jitter_longest_step_ms": excess.longest_ms if excess else None,
        "loop_timed_step_frac": account.timed_share,
        "loop_long_steps": len(account.long_steps),
        "loop_period_steps": account.period,
        "loop_long_step_recurs": account.recurs,
        "loop_long_step_cost": main.removesuffix("_ms") if main else None,
    }
