"""Step-time jitter, torch.compile recompilations, and input shapes that keep changing."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, text
from perfdoctor.rules.measurement import BUSY_MACHINE, busy_limit

STEP_JITTER = "step-jitter"
RECOMPILATIONS = "recompilations"
SHAPE_CHANGES = "shape-changes"

_SHAPES = "shape-changes"

# What a slow step's extra time went to (analyze/loop_account.py timed_excess).
_EXCESS_NAMES = {
    "compile": "torch.compile compiling (a graph compiled inside the timed steps: an eval "
    "graph, a recompile; see the compile section)",
    "eval_forward": "evaluation (forwards of a model in eval mode)",
    "nograd_forward": "no_grad forwards in train mode (a rollout, generation)",
    "save": "checkpointing (torch.save)",
}


def check_step_jitter(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    ratio = num(facts, "step_jitter_ratio")
    steps = num(facts, "steps_timed")
    if ratio is None or steps is None or steps < t["min_steps"] or ratio < t["info_ratio"]:
        return None
    mean = num(facts, "step_ms_mean")
    p50 = num(facts, "step_ms_p50")
    gain = (mean - p50) / mean if mean and p50 is not None and mean > p50 else None
    hints: list[str] = []
    optimizations: list[str] = []
    related: tuple[str, ...] = ()
    shapes = num(facts, "input_shape_changes")
    recompiles = num(facts, "recompile_count")
    if (shapes or 0) >= t["min_distinct_shapes"]:
        hints.append("input shapes change (re-tuning or recompiling for each new shape)")
        optimizations.append("static-shapes")
        related = (SHAPE_CHANGES, RECOMPILATIONS)
    # compile.json, when there: recompiles that all ran before the measured steps do not
    # make those steps uneven.
    elif (recompiles or 0) >= 1 and num(facts, "compile_recompile_ms_per_step") != 0:
        # Shapes held still: blaming them would send the user padding batches for nothing.
        hints.append(
            f"torch.compile recompiled {recompiles:g} time(s) while the training input shapes "
            "stayed the same: a switch to model.eval() for an evaluation in the loop, or a "
            "Python value the graph guards on"
        )
        related = (RECOMPILATIONS,)
    # What the slow steps are comes first: a compile, an evaluation, a rollout or a
    # checkpoint inside a timed step is work the loop chose to do, and no DataLoader setting
    # removes it (timm --torchcompile's long step was 9.5 s compiling the eval graph).
    lead_cost = text(facts, "jitter_excess_cause")
    cause_frac = num(facts, "jitter_excess_cause_frac")
    named = (
        lead_cost is not None and cause_frac is not None and cause_frac >= t["named_excess_frac"]
    )
    if named and cause_frac is not None:
        longest = num(facts, "jitter_longest_step_index")
        longest_ms = num(facts, "jitter_longest_step_ms")
        step_text = (
            f"step {longest:g} took {longest_ms:,.0f} ms; "
            if longest is not None and longest_ms is not None
            else ""
        )
        hints.insert(
            0,
            f"{step_text}{pct(cause_frac)} of the slow steps' extra time is "
            f"{_EXCESS_NAMES.get(str(lead_cost), str(lead_cost))}",
        )
    # Unnamed extra time in long steps whose code the stack sampler named: a simulator, a
    # logger, the script's own work between optimizer steps.
    other = num(facts, "jitter_excess_other_frac")
    code = text(facts, "loop_long_step_code")
    if not named and code and other is not None and other >= t["named_excess_frac"]:
        hints.insert(
            0,
            f"{pct(other)} of the slow steps' extra time is the script's own code between "
            f"optimizer steps ({code.split('; ')[0]}; loop-work-outside-steps)",
        )
    data_wait = num(facts, "data_wait_frac")
    data_share = num(facts, "jitter_excess_data_frac")
    if data_wait is not None and data_wait > t["data_wait_frac"]:
        if data_share is None or data_share >= t["data_excess_frac"]:
            share_text = (
                f"; extra waits hold {pct(data_share)} of the slow steps' extra time"
                if data_share is not None
                else ""
            )
            hints.append(
                f"the DataLoader stalls ({pct(data_wait)} of step time waiting{share_text})"
            )
            optimizations.append("dataloader-workers")
        else:
            hints.append(
                f"the DataLoader wait ({pct(data_wait)} of a step) holds only "
                f"{pct(data_share)} of the slow steps' extra time: not what makes them slow"
            )
    # Other processes' load is measured (busy-machine): name it rather than say nothing
    # explains the jitter; when it is the only cause, the script has nothing to fix.
    others = num(facts, "cpu_other_busy_cores")
    busy = others is not None and others >= busy_limit(num(facts, "cpu_cores_logical"))
    only_busy = busy and not hints
    if busy:
        hints.append(
            f"other processes kept {others:.1f} cores of this machine busy ({BUSY_MACHINE})"
        )
    # A fix is promised no more than its cause holds: the DataLoader's share of the extra
    # time when workers are the only fix listed.
    if gain is not None and optimizations == ["dataloader-workers"] and data_share is not None:
        gain = gain * data_share
    cause = (
        " Likely cause: " + "; ".join(hints) + "."
        if hints
        else " Nothing measured explains it: look for periodic work in the loop (logging, "
        "checkpointing, evaluation) or other load on the machine."
    )
    slow = f" Slow steps cost {pct(gain)} of the mean step time." if gain else ""
    return Finding(
        rule_id=STEP_JITTER,
        severity="warning" if ratio >= t["warning_ratio"] and not only_busy else "info",
        title=f"Step time is uneven: p90 is {ratio:.2f}x the median",
        explanation=f"The slowest tenth of the steps take {ratio:.2f}x the median step.{slow}"
        + cause,
        evidence=(
            ev("step_jitter_ratio", ratio, t["info_ratio"], ">="),
            ev("steps_timed", int(steps), int(t["min_steps"]), ">="),
            *seen(
                facts,
                "step_ms_p50",
                "step_ms_p90",
                "input_shape_changes",
                "recompile_count",
                "jitter_excess_cause",
                "jitter_excess_cause_frac",
                "jitter_excess_data_frac",
            ),
        ),
        optimizations=tuple(optimizations),
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                "(mean - median) / mean x the extra DataLoader wait's share of it: what "
                "workers can remove of the time slow steps add"
                if optimizations == ["dataloader-workers"] and data_share is not None
                else "(mean - median) / mean: the time slow steps add above a typical step"
            )
            if gain is not None
            else "",
        ),
        related=related,
    )


def check_recompilations(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    count = num(facts, "recompile_count")
    if flag(facts, "model_compiled") is not True or count is None or count < t["min_recompiles"]:
        return None
    # The limit as the script set it (compile.json); dynamo's own warning, when recorded,
    # says whether a frame reached it (the count is over every frame, the limit per frame).
    configured = num(facts, "compile_recompile_limit")
    at = configured if configured is not None else t["recompile_limit"]
    hit = flag(facts, "compile_recompile_limit_hit")
    limit = hit if hit is not None else count >= at
    shapes = num(facts, "input_shape_changes")
    stable = shapes is not None and shapes < t["min_distinct_shapes"]
    if limit:
        fallback = (
            f" It reached dynamo's recompile limit ({at:g} per frame), after which the model "
            "runs eagerly: compile bought nothing."
        )
    elif configured is not None and configured > t["recompile_limit"]:
        fallback = (
            f" dynamo's recompile limit was raised to {configured:g} in this run (default "
            f"{t['recompile_limit']:g}; by the script or a library it imports), so these "
            "recompiles ran instead of falling back to eager."
        )
    else:
        fallback = ""
    return Finding(
        rule_id=RECOMPILATIONS,
        severity="critical" if limit else "warning",
        title=f"torch.compile recompiled {count:g} times",
        explanation=(
            f"The compiled model was recompiled {count:g} times, "
            + (
                # compile.json says when: none inside the measured steps (issue 24 item 4)
                "none of them inside the measured steps (not a cost inside training)."
                if num(facts, "compile_recompile_ms_per_step") == 0
                else "each costing seconds of compilation inside training."
            )
            + (
                f"{fallback} The training input shapes stayed the same ({shapes:g} distinct "
                "after warm-up), so they are not the cause: a switch between model.train() "
                "and model.eval() (an evaluation inside the loop) or a Python value the "
                "graph guards on (a changing float or flag) is. Evaluate with the uncompiled "
                "module or a separately compiled copy, and pass changing numbers as tensors."
                if stable
                else " Usually input shapes or Python values guarded by the graph changed."
                f"{fallback} Pad or bucket shapes, use drop_last=True, or compile with "
                "dynamic=True."
            )
        ),
        evidence=(
            ev("recompile_count", int(count), int(t["min_recompiles"]), ">="),
            *seen(
                facts,
                "input_shape_changes",
                "compile_recompile_limit",
                "compile_recompile_limit_hit",
            ),
        ),
        optimizations=() if stable else ("static-shapes",),
        gain=GainEstimate(method="not estimated: compile time depends on the graph"),
    )


def check_shape_changes(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    shapes = num(facts, "input_shape_changes")
    if shapes is None or shapes < t["min_distinct_shapes"]:
        return None
    # cudnn.benchmark does nothing on a CPU run, whatever the script set.
    benchmark = flag(facts, "cudnn_benchmark") is True and flag(facts, "device_is_cuda") is True
    compiled = flag(facts, "model_compiled") is True
    if not (benchmark or compiled):
        return None
    defeated = " and ".join(
        name for name, on in (("cudnn.benchmark", benchmark), ("torch.compile", compiled)) if on
    )
    return Finding(
        rule_id=SHAPE_CHANGES,
        severity="warning",
        title=f"{shapes:g} distinct input shapes after warm-up defeat {defeated}",
        explanation=(
            f"The model saw {shapes:g} different input shapes after warm-up. {defeated} "
            "specialises on shapes, so each new one re-runs autotuning or compilation in the "
            "middle of training. Pad or bucket to a few fixed sizes and drop the last partial "
            "batch."
        ),
        evidence=(
            ev("input_shape_changes", int(shapes), int(t["min_distinct_shapes"]), ">="),
            *seen(facts, "cudnn_benchmark", "model_compiled"),
        ),
        gain=GainEstimate(method="not estimated: cost per new shape depends on the model"),
    )


RULES = (
    Rule(
        id=STEP_JITTER,
        title="Step-time jitter (p90 / p50)",
        area="jitter",
        needs=("step_jitter_ratio", "steps_timed"),
        uses=(
            "step_ms_mean",
            "step_ms_p50",
            "step_ms_p90",
            "input_shape_changes",
            "recompile_count",
            "compile_recompile_ms_per_step",
            "data_wait_frac",
            "cpu_other_busy_cores",
            "cpu_cores_logical",
            "jitter_excess_cause",
            "jitter_excess_cause_frac",
            "jitter_excess_data_frac",
            "jitter_excess_other_frac",
            "loop_long_step_code",
            "jitter_longest_step_index",
            "jitter_longest_step_ms",
        ),
        thresholds={
            "info_ratio": 1.5,
            "warning_ratio": 2.0,
            "min_steps": 10.0,
            "min_distinct_shapes": 3.0,
            "data_wait_frac": 0.05,
            "data_excess_frac": 0.2,
            "named_excess_frac": 0.3,
        },
        source=(
            "p90/p50 >= 1.5: loadtune src/loadtune/heuristic.py; warning only at 2.0 because a "
            "well-tuned CNN reached 1.38 on this shared 2-core machine "
            "(perfdoctor/rules/threshold_measurements.md); the DataLoader is named a cause "
            "only when its extra waits hold a fifth of the slow steps' extra time, and a "
            "named cost (compile, evaluation, no_grad forwards, torch.save) holding 30% of it "
            "is said first: choices here (issue 32: workers were promised 97% of a step whose "
            "long one was compiling)"
        ),
        description="Uneven steps, with the measured cause when there is one.",
        check=check_step_jitter,
        selects_optimizations=True,
        optimizations=("static-shapes", "dataloader-workers"),
    ),
    Rule(
        id=RECOMPILATIONS,
        title="torch.compile recompilations",
        area="jitter",
        needs=("model_compiled", "recompile_count"),
        # stable shapes: the cause is a mode switch or a value; compile.json: when they ran
        uses=(
            "input_shape_changes",
            "compile_recompile_ms_per_step",
            "compile_recompile_limit",
            "compile_recompile_limit_hit",
        ),
        thresholds={"min_recompiles": 2.0, "recompile_limit": 8.0, "min_distinct_shapes": 3.0},
        source=(
            "torch._dynamo config.recompile_limit (8; the script's own value when compile.json "
            "recorded it) falls back to eager (mechanics.md §3.0); "
            "one recompile is dynamo marking a dimension dynamic, so >= 2 warns"
        ),
        description="Recompilations of the compiled root model seen during training.",
        check=check_recompilations,
        selects_optimizations=True,
        optimizations=("static-shapes",),
        root_cause=_SHAPES,
    ),
    Rule(
        id=SHAPE_CHANGES,
        title="Input shape changes that defeat cudnn.benchmark or torch.compile",
        area="jitter",
        needs=("input_shape_changes",),
        uses=("cudnn_benchmark", "model_compiled", "device_is_cuda"),
        thresholds={"min_distinct_shapes": 3.0},
        source=(
            "mechanics.md §3.c (benchmark re-tunes every new shape) and §3.e (compile "
            "recompiles); >= 3 because a last partial batch alone gives 2"
        ),
        description=(
            "Distinct training input shapes of one root model after warm-up, with "
            "shape-specialising modes on (cudnn.benchmark on CUDA, torch.compile)."
        ),
        check=check_shape_changes,
        optimizations=("static-shapes",),
        root_cause=_SHAPES,
    ),
)
