"""Fixes measured under the intra-op thread stall of a busy machine.

On a busy machine a script's intra-op threads stall each other beside the other processes
(benchmarks/README.md, "single_tensor_opt with one busy core": 4-6 ms steps quiet, ~1.1 s at
2 threads under one busy core). When the cpu-threads arm (fewer threads) is accepted there,
load-bound, by STALL_SPEEDUP or more, the stall is most of every arm that keeps the script's
threads: a fix such as a fused optimizer changes a few milliseconds of a step the stall
swings by hundreds, and its own comparison reads the stall, not the fix (it came out "slower"
0.87x [0.79, 0.96] where the script's own clock found it 1.49x faster).

So such a fix's speed verdict from that process is not a verdict on the fix:
`judge_under_stall` words it undecided ("measured under the thread stall"), with what would
decide it, and `stack_on_thread_fix` names it for the stack, whose peel comparison (the stack
against the stack without the fix, both at the thread fix's count) measures what the fix buys
without the stall.

Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.model import VariantResult
from perfdoctor.optimize.catalog import CATALOG
from perfdoctor.optimize.verdicts import excluded_by

# The thread fix beats the script's own thread count by at least this much: the stall, not a
# few percent of better scheduling, is what it removed (quiet, cpu-threads on the issue's
# cases measured 1.0-1.4x; under one busy core 4.7-136x).
STALL_SPEEDUP = 2.0
IN_PROCESS = "in-process"
UNDER_STALL = "undecided: measured under the thread stall"


def thread_stall_fix(results: Sequence[VariantResult]) -> VariantResult | None:
    """The accepted, load-bound single fix that removed a stall (cpu-threads at fewer
    threads, STALL_SPEEDUP or more, measured in one process), else None."""
    found = [
        r
        for r in results
        if r.verdict == "accepted"
        and r.load_bound
        and r.method == IN_PROCESS
        and r.peel_of is None
        and len(r.optimizations) == 1
        and r.interval is not None
        and r.speedup is not None
        and r.speedup >= STALL_SPEEDUP
    ]
    return max(found, key=lambda r: r.speedup or 0.0, default=None)


def _speed_only(result: VariantResult) -> bool:
    """Its verdict rests on speed alone (not on numerics, a refused applier or a crash)."""
    if result.verdict == "undecided":
        return True
    return result.verdict == "rejected" and result.reason.startswith(("slower:", "no gain"))


def _stalled(result: VariantResult, stall: VariantResult) -> bool:
    return (
        result is not stall
        and result.method == IN_PROCESS
        and result.peel_of is None
        and not result.load_bound
        and stall.optimizations[0] not in result.optimizations
        and bool(set(result.run_dirs) & set(stall.run_dirs))  # the same A/B process(es)
        and _speed_only(result)
    )


def judge_under_stall(results: Sequence[VariantResult]) -> list[VariantResult]:
    """`results` with every speed verdict taken under a thread stall worded undecided."""
    stall = thread_stall_fix(results)
    if stall is None:
        return list(results)
    fix = stall.optimizations[0]
    would = f"measuring it with {fix} applied (the stack), or a quieter machine"
    out = []
    for result in results:
        if not _stalled(result, stall):
            out.append(result)
            continue
        seen = result.reason.split(": ", 1)[-1].split("; would decide it", 1)[0]
        reason = (
            f"{UNDER_STALL} ({fix} was {stall.speedup:.2f}x "
            f"faster in the same process: the script's intra-op threads stalled each other "
            f"beside the other processes, and the stall swings both arms far more than this "
            f"fix changes); seen: {seen}; would decide it: {would}"
        )
        out.append(replace(result, verdict="undecided", reason=reason, would_decide=would))
    return out


def stack_on_thread_fix(results: Sequence[VariantResult], chosen: Sequence[str]) -> list[str]:
    """`chosen` (the accepted fixes to stack) and, after them, the fixes whose verdict the
    stall took (judge_under_stall) that exclude none of them: stacked on the thread fix,
    their peel comparisons are measured without the stall."""
    out = list(chosen)
    if thread_stall_fix(results) is None:
        return out
    for r in results:
        opt_id = r.optimizations[0] if len(r.optimizations) == 1 else None
        if (
            opt_id is None
            or opt_id in out
            or opt_id not in CATALOG
            or not r.reason.startswith(UNDER_STALL)
        ):
            continue
        if not excluded_by(opt_id, out):
            out.append(opt_id)
    return out
