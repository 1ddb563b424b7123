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
    """hta_view of an already parsed trace (TraceEvents).

    HTA 0.5.0 filters only when the trace names two or more distinct ProfilerSteps; with
    one or none it keeps the whole file: every GPU op, launched in the trace or not, over
    first to last op (not the step's ops only). When it filters, the last step's start is
    the latest ProfilerStep row among what HTA takes for CPU rows (no `stream` arg), and the
    gpu_user_annotation copies of ProfilerStep on the GPU timeline are such rows: where the
    GPU runs behind, the copy of the last step starts after the host's, and HTA keeps the
    ops launched before it."""
    import numpy as np

    from perfdoctor.analyze.trace_gpu import summarize_gpu
    from perfdoctor.analyze.trace_index import Steps, find_steps

    steps = find_steps(ev)
    if len(set(steps.numbers)) < 2:  # HTA filters nothing then
        empty = np.empty(0)
        return summarize_gpu(ev, Steps((), empty, empty, empty, empty), hta_window=True)
    last = np.array([max(float(steps.starts[-1]), _gpu_step_copies_last_start(ev))])
    everything = np.array([-np.inf])
    before_last = Steps((0,), everything, last, everything, last)
    return summarize_gpu(ev, before_last, launched_only=True, hta_window=True)


def _gpu_step_copies_last_start(ev: Any) -> float:
    """The latest start of a gpu_user_annotation copy of a ProfilerStep (-inf: none)."""
    import numpy as np

    from perfdoctor.analyze.trace_index import STEP_NAME, rows_named

    table = ev.gpu_annotations
    rows = rows_named(table, ev.code_mask(lambda n: STEP_NAME.match(n) is not None))
    return float(table.ts[rows].max()) if rows.size else -np.inf


# The five collective CPU ops torch-tb-profiler 0.4.3 calls Communication (event_parser.py).
_TB_COMM_PREFIXES = ("nccl:", "gloo:")


def tb_dataloader_us_per_step(ev: Any, runtime_seen: bool) -> float | None:
    """The DataLoader figure as torch-tb-profiler 0.4.3 defines it (OverallParser): per
    ProfilerStep, the DataLoader spans less the time a role of higher priority claims
    (Kernel, Memcpy, Memset: any GPU op; Communication: nccl:/gloo: ops; Runtime: runtime
    calls, only where the trace files them under the 2021 `Runtime` category it parses),
    averaged over the steps. perfdoctor's own figure is the whole union of the spans, a
    different quantity where they overlap those."""
    import numpy as np

    from perfdoctor.analyze import intervals
    from perfdoctor.analyze.dataloading import DATALOADER_PREFIXES
    from perfdoctor.analyze.trace_index import find_steps, rows_named

    steps = find_steps(ev)
    if not steps.count:
        return None
    ops = ev.cpu_ops
    # Where tb gives a figure at all, the spans were 2021 `Operator` rows, which the parser
    # files with the annotations (current traces' user_annotation spans tb drops: the tb
    # harness reports no figure for them).
    is_loader = ev.code_mask(lambda n: n.startswith(DATALOADER_PREFIXES))
    spans = [(t, rows_named(t, is_loader)) for t in (ops, ev.annotations)]
    if not any(rows.size for _, rows in spans):
        return 0.0
    dl_s, dl_e = intervals.union(
        np.concatenate([t.ts[r] for t, r in spans]), np.concatenate([t.end[r] for t, r in spans])
    )
    comm = rows_named(ops, ev.code_mask(lambda n: n.startswith(_TB_COMM_PREFIXES)))
    starts = [ev.gpu.ts, ops.ts[comm]]
    ends = [ev.gpu.end, ops.end[comm]]
    if runtime_seen:
        starts.append(ev.runtime.ts)
        ends.append(ev.runtime.end)
    cl_s, cl_e = intervals.union(np.concatenate(starts), np.concatenate(ends))
    left_s, left_e = intervals.subtract(dl_s, dl_e, cl_s, cl_e)
    per_step = [
        intervals.total(*intervals.clip(left_s, left_e, np.array([a]), np.array([b])))
        for a, b in zip(steps.starts.tolist(), steps.ends.tolist(), strict=True)
    ]
    return float(np.mean(per_step))


def tb_view(path: Path, ev: Any) -> dict[str, Any]:
    """perfdoctor's events, counted as torch-tb-profiler counts them where it defines a
    figure differently (like with like for oracle.py)."""
    from perfdoctor.analyze.trace_events import read_trace_bytes

    runtime_seen = b'"Runtime"' in read_trace_bytes(path)
    return {"dataloader_us_per_step": tb_dataloader_us_per_step(ev, runtime_seen)}


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
            from perfdoctor.analyze.trace_events import parse_trace

            summary = load_trace(path)
            got = plain(summary)
            got.pop("locations", None)  # source locations: large, not compared
            got.pop("comm", None)  # per-collective details: not compared with the tools
            ev = parse_trace(path)
            got["hta_gpu"] = plain(hta_view_of(ev))
            got["tb_view"] = plain(tb_view(path, ev))
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
