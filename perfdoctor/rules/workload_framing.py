"""Findings framed for what the trace shows: an inference trace gets no training advice.

An inference process (workload_kind = "inference": no backward, no optimizer step, and a
generate loop, a serving engine, a KV cache or no_grad seen) has no learning rate to
re-tune, no optimizer to fuse and no gradients to accumulate; and a server that already
captures CUDA graphs or compiles (vLLM, SGLang) is not helped by `model.compile()`: what is
left is its eager fallback (vLLM's enforce_eager / --enforce-eager, SGLang's
--disable-cuda-graph) and batch sizes outside its captured sizes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.model import Facts, Finding
from perfdoctor.rules.base import Rule, flag, text
from perfdoctor.rules.engine import RuleResults

# Optimizations that change training, not serving.
TRAINING_ONLY = frozenset(
    {
        "larger-batch",  # its by-hand change re-tunes the learning rate
        "grad-accumulation",
        "fused-optimizer",
        "zero-grad-set-to-none",
        "activation-checkpointing",
    }
)
COMPILE = frozenset({"compile", "compile-cudagraphs"})
# What the framing names instead (manual catalog entries: nothing perfdoctor applies).
SERVING = frozenset({"serving-cuda-graphs", "serving-batch"})
_TRAINING_WORDS = re.compile(r"learning rate|re-tune the LR|convergence", re.I)
TRAINING_AREAS = frozenset({"optimizer"})

SERVE_BATCH = (
    "For inference, a larger batch means serving more requests at once (vLLM max_num_seqs / "
    "max_num_batched_tokens, SGLang --max-running-requests, or batching prompts in "
    "generate): a bigger serving batch trades latency per request for throughput."
)
SERVE_GRAPHS = (
    "The trace shows CUDA graph launches or torch.compile'd code, or a serving engine that "
    "compiles by itself (vLLM compiles even with enforce_eager), so model.compile() is "
    "not the fix: run the engine without its eager flag (vLLM without enforce_eager / "
    "--enforce-eager, SGLang without --disable-cuda-graph) and capture the batch sizes it "
    "serves (vLLM cudagraph_capture_sizes, SGLang --cuda-graph-max-bs), so that no batch "
    "falls back to eager launches."
)


def frame_for_workload(facts: Facts, results: RuleResults, rules: Sequence[Rule]) -> RuleResults:
    if text(facts, "workload_kind") != "inference":
        return results
    areas = {r.id: r.area for r in rules}
    evidence = text(facts, "workload_kind_evidence") or "no backward ops and no optimizer step"
    engine = "vLLM" in evidence or "SGLang" in evidence
    compiled = flag(facts, "graphs_or_compiled") is True or engine
    framed: list[Finding] = []
    dropped: list[str] = []
    for f in results.findings:
        if areas.get(f.rule_id) in TRAINING_AREAS:
            dropped.append(f.rule_id)
            continue
        framed.append(_frame(f, compiled, evidence))
    return replace(results, findings=tuple(framed), passed=(*results.passed, *dropped))


def _without_training_sentences(text: str) -> str:
    """Drop the sentences about the learning rate and convergence, which a larger batch
    changes in training only."""
    sentences = re.split(r"(?<=[.!?])\s+", text)
    kept = [s for s in sentences if not _TRAINING_WORDS.search(s)]
    return " ".join(kept)


def _frame(f: Finding, compiled: bool, evidence: str) -> Finding:
    f = replace(f, explanation=_without_training_sentences(f.explanation))
    opts = tuple(o for o in f.optimizations if o not in TRAINING_ONLY)
    notes = [f"This is an inference trace ({evidence})."]
    if "larger-batch" in f.optimizations:
        opts = (*opts, "serving-batch")
        notes.append(SERVE_BATCH)
    if compiled and any(o in COMPILE for o in opts):
        opts = ("serving-cuda-graphs", *(o for o in opts if o not in COMPILE))
        notes.append(SERVE_GRAPHS)
    if opts == f.optimizations and len(notes) == 1:
        return replace(f, explanation=f"{f.explanation} {notes[0]}")
    gain = f.gain
    if f.optimizations and set(opts) <= SERVING and gain.step_time_frac is not None:
        # The promise was what the dropped fixes win back; the serving advice is not measured.
        gain = replace(gain, step_time_frac=None, method="not estimated for inference")
    return replace(f, optimizations=opts, explanation=" ".join([f.explanation, *notes]), gain=gain)
