"""perfdoctor's analysis of one corpus file, as JSON, run by oracle.py in a fresh process.

    PYTHONPATH=<repo> python benchmarks/_oracle_pd.py trace|snapshot FILE

Dumps every field of the summary perfdoctor returns (TraceSummary with its GpuSummary, or
MemorySummary) generically, so fields perfdoctor gains later appear without a change here;
oracle.py's MAPPING picks what it compares. Prints one JSON object, or {"error": ...}.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any


def plain(value: Any, depth: int = 0) -> Any:
    """JSON-safe copy: dataclasses and objects to dicts, tuples to lists, NaN to None."""
    if depth > 6:
        return None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
        for name in dir(type(value)):  # properties (e.g. activation_bytes_frac) too
            if isinstance(getattr(type(value), name, None), property):
                try:
                    out[name] = plain(getattr(value, name), depth + 1)
                except Exception:
                    out[name] = None
        return out
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return plain(value.item(), depth + 1)
    if hasattr(value, "__dict__"):
        return {k: plain(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def hta_view(path: Path) -> Any:
    """perfdoctor's GPU arithmetic on HTA's own selection of events: with two or more
    ProfilerSteps, only the GPU ops launched (by a call in the trace) before the last step
    starts (HTA's `_filter_irrelevant_gpu_kernels`), so that a difference in the table is a
    difference in arithmetic, not in which events were counted."""
    from perfdoctor.analyze.trace_events import parse_trace

    return hta_view_of(parse_trace(path))


def hta_view_of(ev: Any) -> Any:
    """hta_view of an already parsed trace (TraceEvents)."""
    import numpy as np

    from perfdoctor.analyze.trace_gpu import summarize_gpu
    from perfdoctor.analyze.trace_index import Steps, find_steps

    steps = find_steps(ev)
    if steps.count < 2:  # HTA filters nothing then
        return summarize_gpu(ev, steps, hta_window=True)
    last = np.array([float(steps.starts[-1])])
    everything = np.array([-np.inf])
    before_last = Steps((0,), everything, last, everything, last)
    return summarize_gpu(ev, before_last, launched_only=True, hta_window=True)


def fields() -> dict[str, list[str]]:
    """The dataclass fields (and properties) perfdoctor has today, by class name."""
    got: dict[str, list[str]] = {}
    try:
        from perfdoctor.analyze.memory import MemorySummary
        from perfdoctor.analyze.trace import GpuSummary, TraceSummary
    except Exception:
        return got
    for cls in (TraceSummary, GpuSummary, MemorySummary):
        names = [f.name for f in dataclasses.fields(cls)]
        names += [n for n in dir(cls) if isinstance(getattr(cls, n, None), property)]
        got[cls.__name__] = names
    return got


def main() -> int:
    kind, path = sys.argv[1], Path(sys.argv[2])
    t0 = time.perf_counter()
    try:
        if kind == "trace":
            from perfdoctor.analyze.trace import load_trace

            summary = load_trace(path)
            got = plain(summary)
            got.pop("locations", None)  # source locations: large, not compared
            got["hta_gpu"] = plain(hta_view(path))
        else:
            from perfdoctor.analyze.memory import load_memory

            got = plain(load_memory(path))
            got.pop("timeline_t_s", None)
            got.pop("timeline_allocated_bytes", None)
    except Exception as exc:
        got = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    got["_seconds"] = time.perf_counter() - t0
    got["_fields"] = fields()
    sys.stdout.write(json.dumps(got) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
