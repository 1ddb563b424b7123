"""Eager time between compiled graphs, per dynamo frame, from a profiler trace.

torch.compile wraps each compiled frame's run in a `Torch-Compiled Region: F/A` record
(F = frame id, A = compile attempt; the same ids as the structured trace's compile ids) and
each graph's execution in `## Call CompiledFxGraph <hash> ##`. After a graph break the
rest of the function is a resume frame, entered from inside the first one, so the regions
nest. Time inside the outermost region that no graph call covers is eager Python: the
unsupported code at a break, guard checks, the resume frame's entry. Each such segment is
charged to one compile id:

- the innermost region open at the segment, if that region's own graph already ran (the
  code after the graph is the break that ended the graph), or it has no graph at all (a
  frame that holds only the unsupported call);
- before the innermost region's first graph: its entry (guards, arguments), charged to the
  parent region's break when it is a resume frame, else to no break (the cost of calling a
  compiled function at all).

Backward: the compiled backward graphs (`CompiledFunctionBackward`) run in the reverse
order of the forward ones; the autograd time between two of them (gradient accumulation left
out, it happens with or without a break) is charged to the break between the two forward
graphs. Only where the counts match, else it is reported unattributed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import Steps

REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
GRAPH_CALL = re.compile(r"^## Call CompiledFxGraph")
FORWARD_FN = "CompiledFunction"
BACKWARD_FN = "CompiledFunctionBackward"
ACCUMULATE = "AccumulateGrad"
ENTRY = "entry"  # charge key of eager time that no break causes


@dataclass(frozen=True)
class CompiledRegions:
    """Per-step means over the trace's steps (or over the whole trace without steps)."""

    steps: int  # steps the means are over (1 when the trace has no step spans)
    compiled_ms_per_step: float  # inside graph calls
    region_ms_per_step: float  # inside outermost compiled regions
    # compile id -> eager ms per step charged to that frame's break (forward + backward)
    eager_ms_per_step: dict[str, float] = field(default_factory=dict)
    # compile id -> times its region was entered per step
    entries_per_step: dict[str, float] = field(default_factory=dict)
    backward_unattributed_ms_per_step: float = 0.0


@dataclass
class _Region:
    cid: str
    ts: float
    end: float
    parent: _Region | None = None
    graph_ends: list[float] = field(default_factory=list)  # its own graph calls
    graph_starts: list[float] = field(default_factory=list)


def compiled_regions(ev: TraceEvents, steps: Steps) -> CompiledRegions | None:
    """None when the trace has no compiled region."""
    ops = ev.cpu_ops
    if not len(ops):
        return None
    names = ev.names
    region_codes = {
        i: f"{m.group(1)}/{m.group(2)}" for i, n in enumerate(names) if (m := REGION.match(n))
    }
    if not region_codes:
        return None
    graph_mask = ev.code_mask(lambda n: GRAPH_CALL.match(n) is not None)
    fwd_mask = ev.code_mask(lambda n: n == FORWARD_FN)
    bwd_mask = ev.code_mask(lambda n: n == BACKWARD_FN)
    # Compiling (a recompile inside a profiled step) is dynamo_timed: not eager code.
    compile_mask = ev.code_mask(lambda n: n.endswith("(dynamo_timed)"))
    acc_mask = ev.code_mask(lambda n: ACCUMULATE in n and n.startswith("autograd::engine"))
    windows = list(zip(steps.starts.tolist(), steps.ends.tolist(), strict=True))
    if not windows:
        windows = [(float(ops.ts.min()), float(ops.end.max()))]
    eager: dict[str, float] = defaultdict(float)
    entries: dict[str, float] = defaultdict(float)
    compiled = region_total = unattributed = 0.0
    # Graph calls are cpu_op or user_annotation rows depending on the profiler's settings.
    ann = ev.annotations
    codes = np.concatenate([ops.name, ann.name])
    ts = np.concatenate([ops.ts, ann.ts])
    end = np.concatenate([ops.end, ann.end])
    tid = np.concatenate([ops.tid, ann.tid])
    is_region = np.isin(codes, np.fromiter(region_codes, dtype=np.int32))
    for lo, hi in windows:
        inside = (ts >= lo) & (end <= hi)
        for thread in np.unique(tid[inside & is_region]).tolist():
            rows = np.flatnonzero(inside & (tid == thread))
            rows = rows[np.argsort(ts[rows], kind="stable")]
            f_eager, f_entries, f_graph, f_region, between = _forward(
                rows, codes, ts, end, region_codes, graph_mask, fwd_mask, compile_mask
            )
            for k, v in f_eager.items():
                eager[k] += v
            for k, v in f_entries.items():
                entries[k] += v
            compiled += f_graph
            region_total += f_region
            b_eager, b_un = _backward(
                np.flatnonzero(inside), codes, ts, end, tid, bwd_mask, acc_mask, fwd_mask, between
            )
            for k, v in b_eager.items():
                eager[k] += v
            unattributed += b_un
    n = len(windows)
    return CompiledRegions(
        steps=n,
        compiled_ms_per_step=compiled / 1000.0 / n,
        region_ms_per_step=region_total / 1000.0 / n,
        eager_ms_per_step={k: v / 1000.0 / n for k, v in eager.items()},
        entries_per_step={k: v / n for k, v in entries.items()},
        backward_unattributed_ms_per_step=unattributed / 1000.0 / n,
    )


def _forward(
    rows: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    region_codes: dict[int, str],
    graph_mask: np.ndarray,
    fwd_mask: np.ndarray,
    compile_mask: np.ndarray,
) -> tuple[dict[str, float], dict[str, float], float, float, list[list[str]]]:
    """Eager segments of one thread's compiled regions in one step. Also, for the forward
    graphs that have a backward (inside a CompiledFunction), in order: the breaks charged
    between graph j and graph j+1."""
    eager: dict[str, float] = defaultdict(float)
    entries: dict[str, float] = defaultdict(float)
    stack: list[_Region] = []
    regions: list[_Region] = []
    graphs: list[tuple[float, float, _Region]] = []
    autograd_fns: list[tuple[float, float]] = []
    compiling: list[tuple[float, float]] = []
    for r in rows.tolist():
        t0, t1, code = float(ts[r]), float(end[r]), int(codes[r])
        while stack and stack[-1].end <= t0:
            stack.pop()
        cid = region_codes.get(code)
        if cid is not None:
            region = _Region(cid, t0, t1, stack[-1] if stack else None)
            regions.append(region)
            stack.append(region)
            entries[cid] += 1
        elif graph_mask[code] and stack:
            owner = stack[-1]
            owner.graph_starts.append(t0)
            owner.graph_ends.append(t1)
            graphs.append((t0, t1, owner))
        elif fwd_mask[code] and stack:
            autograd_fns.append((t0, t1))
        elif compile_mask[code] and stack:
            compiling.append((t0, t1))
    tops = [r for r in regions if r.parent is None]
    charges: list[tuple[float, str]] = []
    for top in tops:
        inner = [r for r in regions if top.ts <= r.ts < top.end]
        own = [g for g in graphs if top.ts <= g[0] < top.end]
        own += [(a, b, top) for a, b in compiling if top.ts <= a < top.end]
        cuts = sorted(
            {top.ts, top.end}
            | {r.ts for r in inner}
            | {min(r.end, top.end) for r in inner}
            | {g[0] for g in own}
            | {min(g[1], top.end) for g in own}
        )
        for a, b in pairwise(cuts):
            mid = (a + b) / 2
            if any(g[0] <= mid < g[1] for g in own):
                continue
            inside = _innermost(inner, mid)
            if inside is None:
                continue
            key = _charge(inside, a)
            eager[key] += b - a
            charges.append((a, key))
    with_backward = sorted(
        g for g in graphs if any(s <= g[0] and g[1] <= e for s, e in autograd_fns)
    )
    between = [
        [
            key
            for t, key in charges
            if key != ENTRY and with_backward[j][1] <= t < with_backward[j + 1][0]
        ]
        for j in range(len(with_backward) - 1)
    ]
    graph_total = sum(g[1] - g[0] for g in graphs)  # compiling is in neither total
    region_total = sum(t.end - t.ts for t in tops)
    return dict(eager), dict(entries), graph_total, region_total, between


def _innermost(regions: list[_Region], t: float) -> _Region | None:
    best: _Region | None = None
    for r in regions:
        if r.ts <= t < r.end and (best is None or r.ts >= best.ts):
            best = r
    return best


def _charge(owner: _Region, t: float) -> str:
    """The compile id whose break a segment inside `owner`, starting at t, is charged to."""
    if not owner.graph_starts or any(e <= t for e in owner.graph_ends):
        return owner.cid
    # Before its own first graph: entering the frame (guards); a resume frame exists
    # because of its parent's break.
    return owner.parent.cid if owner.parent is not None else ENTRY


def _backward(
    rows: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    tid: np.ndarray,
    bwd_mask: np.ndarray,
    acc_mask: np.ndarray,
    fwd_mask: np.ndarray,
    between: list[list[str]],
) -> tuple[dict[str, float], float]:
    bwd = rows[bwd_mask[codes[rows]]]
    if bwd.size < 2:
        return {}, 0.0
    # Outermost backward spans only (the engine's evaluate_function wraps a same-named op).
    bwd = bwd[np.argsort(ts[bwd], kind="stable")]
    spans: list[tuple[float, float, int]] = []
    for r in bwd.tolist():
        if spans and ts[r] < spans[-1][1] and tid[r] == spans[-1][2]:
            continue
        spans.append((float(ts[r]), float(end[r]), int(tid[r])))
    acc = rows[acc_mask[codes[rows]]]
    forward_starts = ts[rows[fwd_mask[codes[rows]]]].tolist()
    eager: dict[str, float] = defaultdict(float)
    unattributed = 0.0
    n = len(spans)
    for k in range(n - 1):
        a, b, thread = spans[k][1], spans[k + 1][0], spans[k][2]
        if b <= a or spans[k + 1][2] != thread or any(a < t < b for t in forward_starts):
            continue  # not one backward pass (a trace without step spans)
        accumulate = float(
            sum(
                min(float(end[r]), b) - max(float(ts[r]), a)
                for r in acc.tolist()
                if tid[r] == thread and ts[r] < b and end[r] > a
            )
        )
        gap = max(0.0, (b - a) - accumulate)
        # Backward graph k (in time) is forward graph n-1-k; the gap after it belongs to the
        # breaks between forward graphs n-2-k and n-1-k.
        j = n - 2 - k
        if len(between) == n - 1 and 0 <= j < n - 1 and between[j]:
            breaks = between[j]
            for key in set(breaks):
                eager[key] += gap * breaks.count(key) / len(breaks)
        else:
            unattributed += gap
    return dict(eager), unattributed
