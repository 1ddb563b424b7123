"""The optimization ids whose runtime applier can switch between steps.

Pure (no torch): the planner reads it to decide which variants are measured in-process
against the baseline, in one child run. tests/unit/optimize/test_switchable.py keeps it
equal to the appliers' own `switchable` flags.
"""

from __future__ import annotations

from collections.abc import Iterable

SWITCHABLE: frozenset[str] = frozenset(
    {
        "amp-bf16",
        "amp-fp16",
        "anomaly-off",
        "compile",
        "cpu-fp32",
        "cpu-threads",
        "cudnn-benchmark",
        "cudnn-nondeterministic",
        "dataloader-workers",
        "fused-optimizer",
        "tf32",
    }
)
"""Ids whose applier can switch between steps (Applier.switchable, collect/appliers/base.py)."""

# Fixes whose first activation in a process costs far more than their later switches: a
# whole compile, cuDNN's autotuning, new kernels and their caches for another precision. An
# arm holding one gets a first block that does not count (collect/ab_switch.py). The others
# (anomaly mode, thread count, a persistent DataLoader twin whose workers start with the
# epoch, the fused optimizer step over the state the warm-up built) cost at most a step or
# two at a switch, which the settling steps absorb: their first block counts, and the
# reference arm (the script as it is) is warm from the plan's warm-up. On a 100-step script
# with 3 arms of 11-step windows a first block per arm was a third of the script's steps.
COSTLY_FIRST_USE: frozenset[str] = frozenset(
    {"amp-bf16", "amp-fp16", "compile", "cpu-fp32", "cudnn-benchmark", "tf32"}
)


def needs_warmup_block(optimizations: Iterable[str]) -> bool:
    """Whether an arm switching these fixes on needs a first block that does not count."""
    return any(i in COSTLY_FIRST_USE for i in optimizations)
