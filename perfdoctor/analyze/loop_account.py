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
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfdoctor.analyze.record import RunRecord
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
# Step 0 is also where one-off costs fall (lazy initialisation, first allocations): its excess
# counts as loop work when the named costs (eval/no_grad forwards, torch.save) are at least
# this share of it, or when a later long step holds the same kinds of cost (it recurs). A
# rollout's environment is unnamed "other" time: the first step of CleanRL's
# ppo_continuous_action.py and of Lightning Fabric's PPO example held 20% no_grad forwards
# (60 of 297 ms, 19 of 96 ms; quiet 2-core machine, 2026-11-28) with no second rollout in a
# 25-step run, while a training script's start-up step names nothing: a tenth.
FIRST_STEP_NAMED_SHARE = 0.10

COST_LABELS = {
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


def loop_account(record: RunRecord) -> LoopAccount | None:
    """The loop account of a run; None without timed steps to compare with."""
    account = account_steps(record.steps, record.progress)
    starter = record.observations.get("starting_process")
    if account is None or not isinstance(starter, dict):
        return account
    wall = starter.get("steps_wall_ms")
    if starter.get("step_detection") == "time" and isinstance(wall, (int, float)) and wall > 0:
        # A Hogwild parent's test loop: forwards outside training, in another process.
        costs = {**account.costs_ms, "starting_process_ms": float(wall)}
        return replace(account, costs_ms=costs)
    return account


def _named(step: StepRecord) -> dict[str, float]:
    return {
        "eval_forward_ms": step.eval_forward_ms or 0.0,
        "nograd_forward_ms": step.nograd_forward_ms or 0.0,
        "save_ms": step.save_ms or 0.0,
    }


def _excess_costs(step: StepRecord, excess: float) -> dict[str, float]:
    """The step's excess over a timed step, split into the named costs and the rest."""
    costs = {k: min(v, excess) for k, v in _named(step).items()}
    named = sum(costs.values())
    if named > excess:  # named costs a timed step also has: scale them into the excess
        costs = {k: v * excess / named for k, v in costs.items()}
        named = excess
    costs["other_ms"] = max(excess - named, 0.0)
    return {k: v for k, v in costs.items() if v > 0}


def _one_off(long_steps: Sequence[LongStep]) -> bool:
    """Whether the first step's excess is one-off start-up rather than the loop's own work."""
    first, later = long_steps[0], long_steps[1:]
    kinds = {k for k in first.costs_ms if k != "other_ms"}
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


def account_steps(
    all_steps: Sequence[StepRecord], progress: Sequence[ProgressRow] = ()
) -> LoopAccount | None:
    """The loop account of these steps (progress rows: for the time before the first)."""
    steps = sorted(all_steps, key=lambda s: s.index)
    timed = [s for s in steps if s.phase == "timed"]
    if not timed or len(steps) < 2:
        return None
    typical = statistics.median(s.wall_ms for s in timed)
    loop_ms = sum(s.wall_ms for s in steps)
    long_steps: list[LongStep] = []
    unexplained: list[LongStep] = []
    for s in steps:
        excess = s.wall_ms - typical
        if s.wall_ms < LONG_STEP_FACTOR * typical or excess < LONG_STEP_MIN_EXCESS_MS:
            continue
        found = LongStep(s.index, s.phase, s.wall_ms, excess, _excess_costs(s, excess))
        named = sum(v for k, v in found.costs_ms.items() if k != "other_ms")
        work = named >= LOOP_WORK_NAMED_SHARE * excess or s.index == steps[0].index
        (long_steps if work else unexplained).append(found)
    startup = 0.0
    if long_steps and long_steps[0].index == steps[0].index and _one_off(long_steps):
        startup = long_steps.pop(0).excess_ms  # start-up: not a cost the loop pays again
    untimed = sum(ls.excess_ms for ls in long_steps if ls.phase != "timed")
    long_ms = sum(ls.excess_ms for ls in long_steps)
    indices = [ls.index for ls in long_steps]
    gaps = [b - a for a, b in itertools.pairwise(indices)]
    period = int(statistics.median(gaps)) if gaps else None
    totals: dict[str, float] = {}
    for s in steps:
        for key, value in _named(s).items():
            if value > 0:
                totals[key] = totals.get(key, 0.0) + value
    other = sum(ls.costs_ms.get("other_ms", 0.0) for ls in long_steps)
    if other > 0:
        totals["other_ms"] = other
    # Per step over the loop, without the one-off start-up: what the loop costs each step.
    per_step = (loop_ms - startup) / len(steps)
    representative = long_ms / loop_ms < LONG_SHARE_FLAG
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
    if timed:
        text += f" (step {', '.join(timed)} was timed, but a median leaves a rare long step out)"
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
        "warning": loop_warning(account),
    }


def loop_facts(record: object) -> dict[str, object]:
    """The loop account as flat facts (analyze/fact_catalog.py); {} without an account."""
    steps = getattr(record, "steps", None)
    if not steps:
        return {}
    account = account_steps(steps, getattr(record, "progress", ()) or ())
    if account is None:
        return {}
    costs: dict[str, float] = {}
    for ls in account.long_steps:
        for key, value in ls.costs_ms.items():
            costs[key] = costs.get(key, 0.0) + value
    main = max(costs, key=lambda k: costs[k]) if costs else None
    return {
        "loop_long_step_frac": account.long_share,
        "loop_timed_step_frac": account.timed_share,
        "loop_long_steps": len(account.long_steps),
        "loop_period_steps": account.period,
        "loop_long_step_recurs": account.recurs,
        "loop_long_step_cost": main.removesuffix("_ms") if main else None,
    }
