"""The step table of a trace report, framed for what the trace is: an inference trace has no
DataLoader and no training step, so it shows what it is instead of empty input rows."""

from __future__ import annotations

from perfdoctor.model import Report
from perfdoctor.render import format as fmt

# Rows about the training input pipeline, left out of an inference report when unmeasured.
_INPUT_ROWS = frozenset({"waiting for data", "DataLoader"})


def frame_step_rows(report: Report, rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    kind = report.facts.get("workload_kind")
    if kind != "inference":
        return rows  # a training trace is the default the table is written for
    evidence = report.facts.get("workload_kind_evidence")
    why = f" ({evidence})" if isinstance(evidence, str) and evidence else ""
    framed = [("workload", f"inference{why}")]
    for label, value in rows:
        if label in _INPUT_ROWS and value == fmt.MISSING:
            continue
        framed.append((label, value))
    return framed
