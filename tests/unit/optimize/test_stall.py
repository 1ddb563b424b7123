"""Fixes measured beside a thread stall (optimize/stall.py): a speed verdict taken where
cpu-threads removed a stall of two intra-op threads on a busy machine is undecided, and the
fix is stacked on the thread fix, where its peel is measured without the stall."""

from __future__ import annotations

from dataclasses import replace

from perfdoctor.model import VariantResult
from perfdoctor.optimize.stall import (
    STALL_SPEEDUP,
    judge_under_stall,
    stack_on_thread_fix,
    thread_stall_fix,
)

AB = "ab"


def variant(label: str, verdict: str, reason: str, speedup: float, **kw) -> VariantResult:
    base = VariantResult(
        label=label,
        optimizations=(label,),
        step_ms_p50=None,
        step_ms_p90=None,
        speedup=speedup,
        speedup_noise=None,
        peak_memory_bytes=None,
        loss_delta=None,
        verdict=verdict,  # type: ignore[arg-type]
        reason=reason,
        method="in-process",
        interval=(speedup * 0.9, speedup * 1.1),
        run_dirs=(AB,),
    )
    return replace(base, **kw)


# The busy single-tensor-optimizer case as measured (benchmarks/README.md).
THREADS = variant(
    "cpu-threads",
    "accepted",
    "faster: 136.11x [1.13x, 16409.92x] (1.11e+03 -> 8.17 ms, 5 pairs in 42s, in one process); "
    "load-bound: it wins by leaving contended cores",
    136.11,
    load_bound=True,
)
FUSED_SLOWER = variant(
    "fused-optimizer",
    "rejected",
    "slower: 0.87x [0.79x, 0.96x] (1.11e+03 -> 1.28e+03 ms, 5 pairs in 42s, in one process)",
    0.87,
)


def test_a_rejection_taken_beside_the_stall_is_undecided_with_what_would_decide_it():
    judged = {r.label: r for r in judge_under_stall([FUSED_SLOWER, THREADS])}
    fused = judged["fused-optimizer"]
    assert fused.verdict == "undecided"
    assert "thread stall" in fused.reason and "136.11x" in fused.reason
    assert "seen: 0.87x [0.79x, 0.96x]" in fused.reason  # what was seen stays
    assert fused.would_decide is not None and "cpu-threads applied" in fused.would_decide
    assert judged["cpu-threads"] == THREADS
    assert stack_on_thread_fix(list(judged.values()), ["cpu-threads"]) == [
        "cpu-threads",
        "fused-optimizer",
    ]


def test_no_stall_no_change():
    # Quiet (not load-bound), or a thread fix below the stall's size, or another process.
    quiet = replace(THREADS, load_bound=False)
    small = replace(THREADS, speedup=STALL_SPEEDUP * 0.9)
    elsewhere = replace(FUSED_SLOWER, run_dirs=("other-ab",))
    for results in ([FUSED_SLOWER, quiet], [FUSED_SLOWER, small], [elsewhere, THREADS]):
        assert judge_under_stall(results) == results
    assert thread_stall_fix([FUSED_SLOWER, quiet]) is None
    assert stack_on_thread_fix([FUSED_SLOWER, quiet], []) == []


def test_numerics_refusals_peels_and_accepted_fixes_keep_their_verdicts():
    drift = replace(FUSED_SLOWER, reason="loss drifts beyond tolerance")
    accepted = replace(FUSED_SLOWER, verdict="accepted", reason="faster: 1.3x", speedup=1.3)
    peel = replace(FUSED_SLOWER, label="fused-optimizer-in-stack", peel_of="fused-optimizer")
    coupled = replace(
        FUSED_SLOWER, label="w+t", optimizations=("dataloader-workers", "cpu-threads")
    )
    for other in (drift, accepted, peel, coupled):
        assert judge_under_stall([other, THREADS]) == [other, THREADS]
