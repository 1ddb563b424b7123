"""What a diagnosis rule is, and the small helpers every rule family shares.

A rule is a pure function over `Facts` with named thresholds. It declares the facts it cannot
work without (`needs`: missing -> the rule is skipped with a reason), the facts it reads
when present (`uses`: evidence and refinements only) and the optimizations that address its
findings (`optimizations`, once: the check leaves them out of its Finding unless it picks
among them). It never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from perfdoctor.model import Evidence, Facts, Finding, Scalar, Severity, SourceLocation

Area = Literal[
    "input",
    "precision",
    "launch",
    "cudnn",
    "layout",
    "optimizer",
    "sync",
    "memory",
    "utilization",
    "multi-gpu",
    "debug",
    "cpu",
    "model",
    "jitter",
    "measurement",
]
DeviceScope = Literal["any", "cuda", "cpu"]
Check = Callable[[Facts, Mapping[str, float]], "Finding | None"]

# Severity follows the expected step-time gain with TF-xprof's input-bound ladder
# (op_stats_to_input_pipeline_analysis.cc: >= 5 % moderately, >= 20 % highly bound), applied
# to every time gain so that severities mean the same thing across rules.
GAIN_WARNING = 0.05
GAIN_CRITICAL = 0.20

SEVERITY_RANK: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, eq=False)
class Rule:
    id: str  # stable kebab-case
    title: str
    area: Area
    needs: tuple[str, ...]  # facts without which the rule cannot decide (None -> skipped)
    thresholds: Mapping[str, float]
    source: str  # where each threshold comes from
    description: str
    check: Check
    uses: tuple[str, ...] = ()  # facts read when present (evidence, refinements)
    topics: tuple[str, ...] = ()  # facts.locations topics the findings cite
    # Every optimization id a finding may name, declared here only: the engine gives a finding
    # all of them, unless the check picks among them (selects_optimizations) by the facts.
    optimizations: tuple[str, ...] = ()
    selects_optimizations: bool = False
    device: DeviceScope = "any"
    multi_rank: bool = False  # decides only on runs of several ranks (--nproc-per-node N > 1)
    # Findings of rules sharing a root cause are merged into one headline.
    root_cause: str = field(default="")

    @property
    def merge_key(self) -> str:
        return self.root_cause or self.id

    @property
    def module(self) -> str:
        """The module the rule lives in (its check's), so `perfdoctor rules` says where."""
        return self.check.__module__


# --------------------------------------------------------------------------- fact access


def num(facts: Facts, name: str) -> float | None:
    """A numeric fact as float; None when absent or not a number."""
    value = facts.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def flag(facts: Facts, name: str) -> bool | None:
    """A boolean fact; None when absent."""
    value = facts.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def text(facts: Facts, name: str) -> str | None:
    value = facts.get(name)
    return None if value is None else str(value)


def compute_capability(facts: Facts) -> float | None:
    """ "8.6" or 8.6 -> 8.6; major.minor compares correctly as a float for real GPUs."""
    return num(facts, "gpu_compute_capability")


def is_cuda(facts: Facts) -> bool:
    return flag(facts, "device_is_cuda") is True


def locations(facts: Facts, *topics: str, limit: int = 5) -> tuple[SourceLocation, ...]:
    """The user's lines for these topics, biggest share (or count) first, de-duplicated."""
    seen: dict[tuple[str, int], SourceLocation] = {}
    for topic in topics:
        for loc in facts.locations.get(topic, ()):
            seen.setdefault((loc.file, loc.line), loc)
    ranked = sorted(seen.values(), key=lambda loc: -(loc.share or 0.0) - (loc.count or 0))
    return tuple(ranked[:limit])


def compute_share(facts: Facts) -> float:
    """Share of the step not spent waiting for data: what compute-side fixes can act on."""
    wait = num(facts, "data_wait_frac")
    return 1.0 if wait is None else max(0.0, 1.0 - wait)


# --------------------------------------------------------------------------- finding parts


def _round(value: Scalar) -> Scalar:
    if isinstance(value, float):
        return round(value, 4)
    return value


def ev(
    name: str,
    value: Scalar,
    threshold: Scalar = None,
    comparison: str = "",
    unit: str = "",
    note: str = "",
) -> Evidence:
    return Evidence(
        name=name,
        value=_round(value),
        threshold=_round(threshold),
        comparison=comparison,
        unit=unit,
        note=note,
    )


def seen(facts: Facts, *names: str) -> tuple[Evidence, ...]:
    """Context evidence (no threshold) for the facts that were measured."""
    return tuple(ev(n, facts.get(n)) for n in names if facts.get(n) is not None)


def severity_for_gain(gain: float | None, floor: Severity = "info") -> Severity:
    """The TF-xprof ladder over expected gain, never below `floor`."""
    by_gain: Severity = "info"
    if gain is not None and gain >= GAIN_CRITICAL:
        by_gain = "critical"
    elif gain is not None and gain >= GAIN_WARNING:
        by_gain = "warning"
    return by_gain if SEVERITY_RANK[by_gain] <= SEVERITY_RANK[floor] else floor


def cap_severity(severity: Severity, cap: Severity) -> Severity:
    return severity if SEVERITY_RANK[severity] >= SEVERITY_RANK[cap] else cap


def pct(frac: float) -> str:
    value = frac * 100
    return f"{value:.0f}%" if abs(value) >= 10 else f"{value:.1f}%"


def where(locs: tuple[SourceLocation, ...], limit: int = 3) -> str:
    """' Top lines: a.py:3 (40%), b.py:9.' or '' when the trace gave none."""
    if not locs:
        return ""
    parts = []
    for loc in locs[:limit]:
        extra = f" ({pct(loc.share)})" if loc.share is not None else ""
        extra = extra or (f" ({loc.count}x)" if loc.count is not None else "")
        parts.append(f"{loc}{extra}")
    return " Top lines: " + ", ".join(parts) + "."
