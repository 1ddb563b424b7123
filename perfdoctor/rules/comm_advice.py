"""What to do about exposed communication, by the collective and the parallelism the trace
shows (facts comm_parallelism, comm_dominant_collective, comm_wait_verdict), and how much
one rank's trace may promise of it.

A rank's collective kernel lasts its transfer plus its wait for the last peer to arrive.
One rank's trace shows the first only where the message sizes give it away
(analyze/comm_wait.py); the wait is another rank's lateness, which nothing on this rank
removes. So the gain is the transfer part where it is known, and otherwise only a share of
the exposed time (the rule's `assumed_hidden`), with the rest named as what the trace of
one rank cannot resolve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfdoctor.model import Facts
from perfdoctor.rules.base import num, pct, text

_DDP = (
    "DDP hides the gradient all-reduce behind backward only when buckets are ready early: "
    "keep find_unused_parameters off, set gradient_as_bucket_view=True and a bucket_cap_mb "
    "that fits the model; with gradient accumulation, wrap the micro-batches between two "
    "optimizer steps in model.no_sync() so only the last one communicates (a larger batch "
    "does the same per sample; re-check the learning rate either way)."
)
# Compression halves a message only where it is fp32: an all-reduce already in bf16 (an
# MI300X DDP trace was told to compress its bf16 gradients) has nothing to gain from it.
_COMPRESS = "The messages are fp32: a DDP comm hook (bf16 compression) halves each of them."
_COMPRESS_UNKNOWN = (
    "If the gradients travel in fp32 (the trace records no message dtype), a DDP comm hook "
    "(bf16 compression) halves each message."
)
FP32_DTYPES = frozenset({"float", "float32", "c10::float", "torch.float32"})


def compression_text(facts: Facts) -> str:
    """The compression advice the recorded message dtype allows ('' when low precision)."""
    dtype = text(facts, "comm_dtype")
    if dtype is None:
        return _COMPRESS_UNKNOWN
    return _COMPRESS if dtype.lower() in FP32_DTYPES else ""


_FSDP = (
    "FSDP's all-gathers and reduce-scatters hide behind compute when they are issued ahead: "
    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE and forward_prefetch=True (FSDP1), or "
    "fully_shard(..., reshard_after_forward=False) on the last blocks (FSDP2) to skip their "
    "re-gather in backward at the cost of memory; larger FSDP units mean fewer, larger "
    "collectives."
)
_EXPERT = (
    "Expert-parallel all-to-all (dispatch and combine) is exposed unless it overlaps with "
    "compute: run the dispatch of one micro-batch under the experts of another (DeepEP's "
    "low-latency mode with its hook-based overlap, or a two-stream schedule); a lower "
    "capacity factor or token dropping shrinks the messages; keep experts within a node "
    "(NVLink) where the expert count allows."
)
_ALL_TO_ALL = (
    "All-to-all traffic (embedding or expert sharding) is exposed unless it overlaps with "
    "compute: pipeline the input all-to-all of the next batch under this batch's dense "
    "compute (TorchRec's TrainPipelineSparseDist does this), and shard tables to balance "
    "the bytes each rank sends."
)
_PIPELINE = (
    "Pipeline send/recv waits are pipeline bubbles: more micro-batches per step (or an "
    "interleaved schedule) shrink them."
)
_TENSOR_PARALLEL = (
    "For tensor-parallel overlap (Megatron-style), CUDA_DEVICE_MAX_CONNECTIONS=1 keeps the "
    "communication kernels ahead of the compute they overlap."
)
_TP = (
    "Tensor-parallel all-reduces sit inside every layer: overlap them with the next GEMM "
    "(async tensor parallelism / sequence parallelism, torch's micro-pipelined "
    "_symmetric_memory ops), fuse them with the norm that follows, or use fewer "
    "tensor-parallel ranks (more data or pipeline parallelism) where the model fits. "
    + _TENSOR_PARALLEL
)
_WAITING = (
    "Most of this time is waiting for a peer, not moving data: another rank arrives late "
    "at the collectives (a straggler elsewhere), which a trace of this one rank cannot "
    "resolve. Pass the other ranks' traces to find the rank that holds the job up."
)
_UNRESOLVED = (
    "Part of this time may be waiting for a slower peer rather than moving data; a trace of "
    "one rank cannot tell (it records no message sizes to compare with the link): pass the "
    "other ranks' traces to split the two."
)


@dataclass(frozen=True)
class CommAdvice:
    text: str
    optimizations: tuple[str, ...]


def advice(facts: Facts) -> CommAdvice:
    """The fixes that fit the collectives this trace shows."""
    parallelism = text(facts, "comm_parallelism")
    if parallelism == "fsdp":
        return CommAdvice(_FSDP, ())
    if parallelism == "expert_parallel":
        return CommAdvice(_EXPERT, ())
    if parallelism == "all_to_all":
        return CommAdvice(_ALL_TO_ALL, ())
    if parallelism == "pipeline":
        return CommAdvice(_PIPELINE, ())
    if parallelism == "tensor_parallel":
        return CommAdvice(_TP, ())
    tp = _TENSOR_PARALLEL if parallelism is None else ""
    # One fix per share: accumulation and a larger batch cut the same all-reduces, so only
    # one of them carries the estimate (the other is named in the text).
    return CommAdvice(
        " ".join(p for p in (_DDP, compression_text(facts), tp) if p), ("grad-accumulation",)
    )


@dataclass(frozen=True)
class CommGain:
    frac: float
    method: str
    wait_text: str


def exposed_gain(facts: Facts, t: Mapping[str, float], exposed: float) -> CommGain:
    """What removing the exposed communication can save, from one rank's figures."""
    share = num(facts, "comm_transfer_share")
    verdict = text(facts, "comm_wait_verdict")
    if share is not None:
        wait = (
            " " + _WAITING
            if verdict == "waiting"
            else (f" About {pct(1 - share)} of it is waiting for a peer." if share < 0.9 else "")
        )
        reason = text(facts, "comm_wait_reason")
        return CommGain(
            exposed * share,
            f"exposed communication x its transfer part ({pct(share)}"
            + (f": {reason}" if reason else "")
            + "); the wait for a peer is left out",
            wait,
        )
    hidden = t["assumed_hidden"]
    if num(facts, "job_late_rank") is not None:
        # The late rank of several traced ranks (analyze/job_ranks.py) waits for none of them.
        untraced = num(facts, "ranks_untraced")
        if not untraced:
            return CommGain(
                exposed,
                "exposed communication of the rank the others wait for: it waits for no "
                "traced rank, so all of it is transfer",
                " This rank arrives last at the collectives, so its communication time is "
                "transfer, not waiting.",
            )
        return CommGain(
            exposed * hidden,
            f"exposed communication x {hidden:g}: the {untraced:.0f} untraced ranks may "
            "keep this rank waiting too",
            f" This rank arrives last among the traced ranks, but {untraced:.0f} ranks were "
            "not traced, and it may wait for them: pass their traces to split transfer from "
            "waiting.",
        )
    return CommGain(
        exposed * hidden,
        f"exposed communication x {hidden:g}: one rank's trace cannot split transfer from "
        "waiting for a peer",
        " " + _UNRESOLVED,
    )
