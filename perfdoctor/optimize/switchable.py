"""The optimization ids whose applier can be switched on and off between steps
(collect/appliers/base.py, `Applier.switchable`): measured in one process by in-process A/B
(optimize/inprocess.py) instead of by re-runs. A test keeps this in step with the appliers.
Pure: no torch."""

from __future__ import annotations

SWITCHABLE: frozenset[str] = frozenset({"anomaly-off", "cpu-threads"})
