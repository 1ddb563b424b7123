"""How the machine's measured load changes a CPU-side finding.

Other processes that keep cores busy during the timed steps (busy-machine) slow the training
process, its DataLoader workers and its intra-op threads unevenly: every share measured on
the CPU side (data wait, optimizer share, step jitter, host time) moves with that load, and
advice to take more cores asks for cores the machine does not have free (perfdoctor's own
A/B measured "use all cores for intra-op threads" at 0.25-0.30x on this shared 2-core machine
while other processes kept 1.4-1.9 cores busy). The rules that advise taking cores (cpu.py,
input_pipeline.py) change their advice themselves; `qualify` adds the caveat to every other
CPU-side finding, once, from the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfdoctor.model import Evidence, Facts, Finding
from perfdoctor.rules.base import Area, Rule, cap_severity, ev, flag, num
from perfdoctor.rules.measurement import BUSY_MACHINE, busy_limit

# Areas whose figures are host (CPU) time whatever the device: the host loads data, launches
# kernels, syncs and sets the step's pace.
HOST_AREAS: frozenset[Area] = frozenset({"input", "cpu", "launch", "jitter", "sync"})
# On a CPU run the compute itself shares the cores too, gloo's collectives among it (a rank
# the scheduler delays keeps the others waiting in the all-reduce); memory findings do not
# move with load, and busy-machine is the load itself. rank-straggler names the load itself.
_NEVER: frozenset[Area] = frozenset({"measurement", "memory"})
LOAD_FACT = "cpu_other_busy_cores"


@dataclass(frozen=True)
class Contention:
    others: float  # cores other processes kept busy (mean over the timed steps)
    cores: float | None  # logical cores of the machine
    limit: float  # busy_limit for that many cores

    @property
    def of_cores(self) -> str:
        return f" of {self.cores:.0f}" if self.cores else ""

    def evidence(self, note: str) -> Evidence:
        return ev(LOAD_FACT, round(self.others, 2), round(self.limit, 2), ">=", note=note)


def contention(facts: Facts) -> Contention | None:
    """The measured load of other processes when it is at or above busy-machine's limit."""
    others = num(facts, LOAD_FACT)
    if others is None:
        return None
    cores = num(facts, "cpu_cores_logical")
    limit = busy_limit(cores)
    return Contention(others, cores, limit) if others >= limit else None


def load_sentence(c: Contention) -> str:
    return (
        f" Other processes kept {c.others:.1f}{c.of_cores} cores busy during these steps "
        f"({BUSY_MACHINE}): the shares measured here are distorted by that load, and more "
        "threads or workers would compete with it for the same cores. Re-measure on a quiet "
        "machine before acting on this."
    )


def is_cpu_side(area: Area, facts: Facts) -> bool:
    if area in _NEVER:
        return False
    return area in HOST_AREAS or flag(facts, "device_is_cuda") is False


def _mentions_load(finding: Finding) -> bool:
    """The rule weighed the load itself (step-jitter names it as a cause)."""
    return any(e.name == LOAD_FACT for e in finding.evidence) or (
        f"({BUSY_MACHINE})" in finding.explanation
    )


def qualify(rule: Rule, finding: Finding, facts: Facts) -> Finding:
    """A CPU-side finding measured on a busy machine says so, and is not critical: a share
    the load inflated is no reason to call the script's own cost critical. Findings that
    already weigh the load (their evidence names it) are left as their rule wrote them."""
    c = contention(facts)
    if c is None or not is_cpu_side(rule.area, facts) or _mentions_load(finding):
        return finding
    return replace(
        finding,
        severity=cap_severity(finding.severity, "warning"),
        explanation=finding.explanation + load_sentence(c),
        evidence=(*finding.evidence, c.evidence("busy machine: the shares are distorted")),
    )
