"""Training or inference: what the trace shows the process doing.

Training runs backward (autograd nodes `…Backward0`, `autograd::engine::evaluate_function`)
and an optimizer step (`Optimizer.step#…`, fused optimizer ops). Inference runs neither, and
usually says so: Hugging Face `generate` and its KV cache (`transformers/cache_utils.py`),
vLLM's `execute_model` and cache kernels (`reshape_and_cache`, `unified_kv_cache_update`),
SGLang's `forward_decode` and paged attention, `torch.no_grad` / `inference_mode` frames.
Without either kind of evidence the trace says nothing (a forward-only trace may still be a
training script profiled during evaluation), so the kind is unknown.

Serving stacks compile and capture CUDA graphs themselves: a graph launch (cudaGraphLaunch,
hipGraphLaunch) or dynamo / inductor frames mean `model.compile()` is not the advice to give.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfdoctor.analyze.trace_events import Table, TraceEvents

_BACKWARD = re.compile(
    r"Backward\d*$|^autograd::engine::evaluate_function|^## backward ##$"
    r"|torch/autograd/__init__\.py\(\d+\): backward$|torch/_tensor\.py\(\d+\): backward$"
)
_OPTIMIZER = re.compile(r"^Optimizer\.step#|^aten::_fused_adamw?_?$|^aten::_foreach_add_$")
# What each inference stack leaves in a trace (frames, ops, annotations, kernels).
_INFERENCE = (
    ("Hugging Face generate", re.compile(r"generation/utils\.py\(\d+\): generate$")),
    ("KV cache", re.compile(r"cache_utils\.py|kv_?cache|reshape_and_cache|paged_attention", re.I)),
    ("vLLM execute_model", re.compile(r"\): execute_model$|vllm/")),
    ("SGLang", re.compile(r"sglang/|forward_decode|\[DECODE ", re.I)),
    ("no_grad / inference_mode", re.compile(r"grad_mode\.py\(\d+\)|inference_mode")),
)
_GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|hipGraphLaunch|cuGraphLaunch)")
_COMPILED = re.compile(r"torch/_inductor/|^Torch-Compiled Region|CompiledFunction|^triton_")


@dataclass(frozen=True)
class WorkloadKind:
    kind: str | None  # "training", "inference", or None when the trace does not say
    evidence: tuple[str, ...]  # what decided it, in words
    graphs_or_compiled: bool  # CUDA graph launches or torch.compile frames in the trace


def workload_kind(ev: TraceEvents) -> WorkloadKind:
    names = set(_names(ev, (ev.cpu_ops, ev.annotations, ev.python, ev.runtime, ev.gpu)))
    training: list[str] = []
    if any(_BACKWARD.search(n) for n in names):
        training.append("backward ops")
    if any(_OPTIMIZER.search(n) for n in names):
        training.append("an optimizer step")
    inference = [label for label, pat in _INFERENCE if any(pat.search(n) for n in names)]
    graphs = any(_GRAPH_LAUNCH.match(n) for n in names)
    compiled = graphs or any(_COMPILED.search(n) for n in names)
    if training:
        return WorkloadKind("training", tuple(training), compiled)
    if inference:
        evidence = ("no backward ops and no optimizer step", *inference)
        return WorkloadKind("inference", evidence, compiled)
    return WorkloadKind(None, (), compiled)


def _names(ev: TraceEvents, tables: tuple[Table, ...]) -> list[str]:
    codes: set[int] = set()
    for t in tables:
        if len(t):
            codes.update(set(t.name.tolist()))
    return [ev.names[c] for c in codes]
