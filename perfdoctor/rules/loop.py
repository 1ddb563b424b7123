"""Work between optimizer steps that the step figures leave out: a rollout, an evaluation, a
checkpoint in a few long steps that hold much of the loop's wall time (analyze/loop_account.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.analyze.loop_account import LONG_SHARE_FLAG
from perfdoctor.model import Facts, Finding
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, text

LOOP_WORK = "loop-work-outside-steps"

_COSTS = {
    "compile": (
        "torch.compile compiling (a graph compiled inside the loop: an eval graph, a recompile)",
        "compile the other graph once before timing matters (one eval pass at start-up), or "
        "stop the recompiles the compile section lists",
    ),
    "eval_forward": (
        "evaluation (forwards of a model in eval mode)",
        "evaluate less often or on fewer batches, or under torch.inference_mode()",
    ),
    "nograd_forward": (
        "no_grad forwards of the model in train mode (rollouts, generation)",
        "fewer, larger forwards (more environments per vectorised step), or "
        "torch.inference_mode() around them; the environment's own time is the script's",
    ),
    "save": (
        "checkpointing (torch.save)",
        "checkpoint less often, or hand the state to a background thread",
    ),
    "other": (
        "the script's own code between optimizer steps (an environment, logging, callbacks)",
        "profile that code on its own (py-spy, cProfile): perfdoctor's step figures do not "
        "cover it",
    ),
}


def _who(period: float | None, count: float | None) -> str:
    if period:
        return f"One step in every {period:g} takes"
    return "One step takes" if count == 1 else "A few steps take"


def check_loop_work(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    measured = num(facts, "loop_long_step_frac")
    # On a loaded machine the short steps stretch more than the long ones; judged also at
    # the fast pace (analyze/loop_account.py load_robust_share), the finding survives load.
    fast = num(facts, "loop_long_step_frac_fast_pace")
    share = max(v for v in (measured, fast, -1.0) if v is not None)
    periodic = flag(facts, "loop_long_step_periodic_under_load") is True
    if measured is None or (share < t["long_step_frac"] and not periodic):
        return None
    at_pace = fast is not None and measured is not None and fast > measured
    cost = text(facts, "loop_long_step_cost") or "other"
    what, advice = _COSTS.get(cost, _COSTS["other"])
    period = num(facts, "loop_period_steps")
    # Only a heavy first step: it may be a one-off (an evaluation at iteration 0) or every
    # cycle's (a rollout): said, but not ranked as a cause.
    recurs = flag(facts, "loop_long_step_recurs") is not False
    timed = num(facts, "loop_timed_step_frac")
    recur = f" every {period:g} steps" if period else ""
    timed_text = f" A timed step is {pct(timed)} of the loop's wall time per step." if timed else ""
    stretch = num(facts, "loop_load_stretch")
    if at_pace or stretch is not None:
        loaded = (
            f" (a timed step took {stretch:.0f}x its CPU time in wall time)"
            if stretch is not None
            else ""
        )
        timed_text += (
            f" Other processes loaded the machine{loaded}, and load stretches short steps of "
            "small torch ops far more than the Python of the long ones: as measured the long "
            f"steps hold {pct(measured)} of the loop"
            + (
                f", {pct(share)} with the steps between them at the pace of the fastest timed "
                "steps or of their CPU time"
                if at_pace
                else ""
            )
            + "; on a quiet machine, more than measured."
        )
    where = text(facts, "loop_long_step_code")
    at = f", in {where.split('; ')[0].split(' (')[0]}" if where else ""
    if where:
        what = f"{what}; the main thread was in {where}"
        if cost == "other":
            advice = (
                "speed up that code (it is the script's own Python: vectorise the simulator, "
                "step several environments per forward), or overlap it with training"
            )
    return Finding(
        rule_id=LOOP_WORK,
        severity="warning" if recurs else "info",
        title=f"Long steps{recur} hold {pct(share)} of the loop: mostly {what.split(' (')[0]}{at}",
        explanation=(
            f"{_who(period, num(facts, 'loop_long_steps'))} 3x "
            "a timed step or more, and their excess is "
            f"{pct(share)} of the loop's wall time, mostly {what}. The step figures are "
            "medians of the timed steps, so they describe the steps between these, and the "
            f"other findings speed up only that part.{timed_text} To speed up the loop: "
            f"{advice}. To measure it whole, time a full cycle (--steps at least the period)."
            + (
                ""
                if recurs
                else " Only the first step held this work in this run: if the loop does not "
                "repeat it, it is a one-off start-up cost and none of this applies."
            )
        ),
        evidence=(
            ev(
                "loop_long_step_frac_fast_pace" if at_pace else "loop_long_step_frac",
                share,
                t["long_step_frac"],
                ">=",
            ),
            *seen(
                facts,
                *(("loop_long_step_frac",) if at_pace else ()),
                "loop_timed_step_frac",
                "loop_long_steps",
                "loop_period_steps",
                "loop_long_step_code",
                "loop_load_stretch",
            ),
        ),
    )


RULES = (
    Rule(
        id=LOOP_WORK,
        title="Work between optimizer steps the step figures leave out",
        area="jitter",
        needs=("loop_long_step_frac",),
        uses=(
            "loop_long_step_frac_fast_pace",
            "loop_load_stretch",
            "loop_long_step_periodic_under_load",
            "loop_long_step_code",
            "loop_long_step_cost",
            "loop_period_steps",
            "loop_timed_step_frac",
            "loop_long_steps",
            "loop_long_step_recurs",
        ),
        thresholds={"long_step_frac": LONG_SHARE_FLAG},
        source=(
            "choice here: a fifth of the loop left out of the step figures is enough to change "
            "which cost leads; on CleanRL ppo.py (CartPole, 4 envs x 128 steps, 16 minibatch "
            "steps per update) the rollouts held 67% of the loop (benchmarks/README.md, "
            "issue 24 section)"
        ),
        description=(
            "Long steps with evaluation, no_grad forwards or torch.save in them, whose excess "
            "is a large share of the loop's wall time: the step figures miss that work."
        ),
        check=check_loop_work,
    ),
)
