"""Whether the measurement itself can be trusted: other processes competing for the machine."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding
from perfdoctor.rules.base import Rule, ev, num, seen

BUSY_MACHINE = "busy-machine"

# Shared with optimize/verdicts.py, which marks A/B verdicts measured on a busy machine.
BUSY_THRESHOLDS = {"min_other_cores": 0.5, "min_other_frac": 0.25}


def busy_limit(cores: float | None, t: Mapping[str, float] = BUSY_THRESHOLDS) -> float:
    """Cores that other processes may keep busy before timings are suspect."""
    return max(t["min_other_cores"], t["min_other_frac"] * (cores or 1.0))


def check_busy_machine(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    others = num(facts, "cpu_other_busy_cores")
    if others is None:
        return None
    cores = num(facts, "cpu_cores_logical")
    limit = busy_limit(cores, t)
    if others < limit:
        return None
    of_cores = f" of {cores:.0f}" if cores else ""
    # The samples cover the timed steps when there were any; otherwise (a run stopped or
    # crashed before them) the whole run, and the sentence must not claim timed steps.
    timed = num(facts, "steps_timed")
    during = "During the timed steps" if timed else "While the run ran (it had no timed steps)"
    return Finding(
        rule_id=BUSY_MACHINE,
        severity="warning",
        title=f"Other processes kept {others:.1f}{of_cores} cores busy while this ran",
        explanation=(
            f"{during}, processes outside this run used {others:.1f}{of_cores} "
            "CPU cores on average. They compete with the training process, its DataLoader "
            "workers and its CPU threads, so the step times here (and every A/B verdict, "
            "which compares runs made at different moments) move with that load rather than "
            "with the script. Re-run on a quiet machine before trusting small differences."
        ),
        evidence=(
            ev("cpu_other_busy_cores", round(others, 2), round(limit, 2), ">="),
            *seen(
                facts, "cpu_busy_cores", "child_cpu_busy_cores", "cpu_cores_logical", "steps_timed"
            ),
        ),
    )


RULES = (
    Rule(
        id=BUSY_MACHINE,
        title="The machine was busy with other processes",
        area="measurement",
        needs=("cpu_other_busy_cores",),
        uses=("cpu_cores_logical", "cpu_busy_cores", "child_cpu_busy_cores", "steps_timed"),
        thresholds=dict(BUSY_THRESHOLDS),
        source=(
            "measured on this shared 2-core machine (2026-11-23): gpt_char_lm.py took "
            "179 ms per step while test suites kept 1.37 of the 2 cores busy (50 ms on the "
            "quiet machine, sample_models/README.md), and its cpu-threads variant measured "
            "0.30x there against 1.52x in a quieter session; at 0.04-0.17 other cores the CNN "
            "sample's runs were steady. Half a core, or a quarter of the cores on larger "
            "machines: choice here"
        ),
        description=(
            "CPU cores used by processes outside the run during the timed steps: timings "
            "and A/B verdicts are only as steady as the machine."
        ),
        check=check_busy_machine,
    ),
)
