"""Intra-op threads that stall each other on a loaded machine: the stall is the finding.

torch runs an op's parallel part on its intra-op threads and waits for all of them. When other
processes take the cores, one of those threads is descheduled and the others wait for it at
the op's end, op after op: a phase of small ops (an optimizer step over many small tensors, a
small model's forward) then takes 30-200x its quiet time (super_resolution's Adam read 118-171
ms per step under load against 0.8 ms quiet). Every share measured in such a run is the
stall's, and a finding built on one (single-tensor optimizer, input-bound) must not lead: this
one does, with the fix that removes the stall (fewer threads than the cores other processes
leave free).
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, num, seen, text
from perfdoctor.rules.machine_load import contention

INTRA_OP_STALL = "intra-op-stall"


def check_intra_op_stall(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    ratio = num(facts, "phase_stall_ratio")
    threads = num(facts, "torch_num_threads")
    busy = contention(facts)
    if ratio is None or threads is None or busy is None:
        return None
    if threads < t["min_threads"] or ratio < t["stall_ratio"]:
        return None
    phase = text(facts, "phase_stall_phase") or "a phase"
    median = num(facts, "phase_stall_median_ms") or 0.0
    fastest = num(facts, "phase_stall_fastest_ms") or 0.0
    step = num(facts, "step_ms_p50")
    # What the stall adds to a median step, bounded by the step itself.
    gain = min(1.0, (median - fastest) / step) if step and median > fastest else None
    free = max(1, int((busy.cores or threads) - busy.others))
    target = max(1, min(int(threads) - 1, free))
    return Finding(
        rule_id=INTRA_OP_STALL,
        severity="critical" if ratio >= t["critical_ratio"] else "warning",
        title=(
            f"Intra-op threads stall each other under load: the {phase} took {median:,.1f} ms "
            f"at the median and {fastest:,.2f} ms at its fastest ({ratio:,.0f}x)"
        ),
        explanation=(
            f"The same {phase}, on the same shapes, ran in {fastest:,.2f} ms in one timed step "
            f"and {median:,.1f} ms in the median one. The work did not change: other processes "
            f"kept {busy.others:.1f}{busy.of_cores} cores busy, and with {threads:.0f} "
            "intra-op threads each op waits at its end for a thread the scheduler has "
            "descheduled, op after op. The step figures and every share in this report are "
            "inflated by that stall, so a finding built on them (an optimizer, a data wait) "
            f"is the stall's, not the script's. On a shared machine, torch.set_num_threads("
            f"{target}) (or OMP_NUM_THREADS={target}) leaves no thread to wait for; on a "
            "quiet one, re-measure before changing anything. (cpu-oversubscribed is the same "
            "contention between the run's own threads and its DataLoader workers.)"
        ),
        evidence=(
            ev("phase_stall_ratio", round(ratio, 1), t["stall_ratio"], ">="),
            ev("torch_num_threads", int(threads), int(t["min_threads"]), ">="),
            busy.evidence("busy machine: what descheduled the threads"),
            *seen(facts, "phase_stall_median_ms", "phase_stall_fastest_ms", "step_ms_p50"),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method="the phase's median less its fastest instance, over the median step",
        ),
    )


RULES = (
    Rule(
        id=INTRA_OP_STALL,
        title="Intra-op threads stall each other on a loaded machine",
        area="cpu",
        needs=("phase_stall_ratio", "torch_num_threads", "cpu_other_busy_cores"),
        uses=(
            "phase_stall_phase",
            "phase_stall_median_ms",
            "phase_stall_fastest_ms",
            "step_ms_p50",
            "cpu_cores_logical",
        ),
        thresholds={"stall_ratio": 10.0, "critical_ratio": 30.0, "min_threads": 2.0},
        source=(
            "measured here (2 cores, torch 2.13): quiet, a phase's median is within 1.5x of "
            "its fastest timed instance; at load 9-11 a policy-gradient update's forward read "
            "0.3-165 ms and super_resolution's Adam 118-171 ms against 0.8 ms quiet (issue "
            "32). 10x: far outside quiet scatter; 30x critical: the stall is most of the step"
        ),
        description=(
            "A phase whose median timed instance is 10x or more its fastest, with two or more "
            "intra-op threads on a machine other processes keep busy."
        ),
        check=check_intra_op_stall,
        device="cpu",
        # The fix that removes the stall: fewer threads, sized to the cores left free.
        optimizations=("cpu-threads",),
    ),
)
