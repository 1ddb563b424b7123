"""The optimization ids whose runtime applier can switch between steps.

Pure (no torch): the planner reads it to decide which variants are measured in-process
against the baseline, in one child run. tests/unit/optimize/test_switchable.py keeps it
equal to the appliers' own `switchable` flags.
"""

from __future__ import annotations

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
