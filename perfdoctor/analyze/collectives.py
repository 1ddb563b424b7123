"""What a communication kernel or op is, from its name: the library that runs it and the
collective it performs. Pure string rules, no trace access.

Only `nccl*` kernels used to count as communication, so an MoE trace whose DeepEP all-to-all
took 46% of the kernel time, or a run on symmetric-memory all-reduce, showed them as
compute. The families recognised here, with the names they emit:

* NCCL: `ncclKernel_AllReduce_RING_LL_Sum_float`, `ncclDevKernel_AllGather_RING_LL`,
  `ncclDevKernel_SendRecv`, `ncclDevKernel_Generic` (the NCCL >= 2.19 naming);
* RCCL (ROCm's NCCL): the same `nccl*` names, and `rccl*` / `rcclGenericKernel`;
* HCCL (Gaudi/Ascend): `hccl*`;
* DeepEP, expert-parallel all-to-all: `deep_ep::intranode::dispatch<...>`,
  `deep_ep::internode_ll::combine<...>`, `notify_dispatch`, `cached_notify_combine`;
  the same family under another namespace (`dpsk::ep::internode::dispatch<...>`: its
  dispatch/combine/notify kernels in an `ep`/`internode`/`intranode` scope);
  pplx-kernels (`pplx::`); any kernel named for an all-to-all (`all_to_all`, `alltoall`);
* NVSHMEM / IBGDA (`nvshmemi_*`, `ibgda_*`): the one-sided transfers under those;
* symmetric memory / NVLS (torch.distributed._symmetric_memory): `multimem_all_reduce`,
  `multimem_all_gather`, `one_shot_all_reduce`, `two_shot_all_reduce`; vLLM's and
  TensorRT-LLM's custom all-reduce (`cross_device_reduce_*stage`, `allreduce_fusion`);
* gloo runs on the CPU: its ops (`gloo:all_reduce`, `c10d::allreduce_`) are host ops.

The collective comes from the same name, or better from the `Collective name` that kineto's
`record_param_comms` records (torch >= 2.1): an NCCL all-to-all runs as `SendRecv` kernels,
so the kernel name alone calls it send/recv.
"""

from __future__ import annotations

import re

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
SEND_RECV = "send_recv"
BROADCAST = "broadcast"
REDUCE = "reduce"
BARRIER = "barrier"
OTHER = "other"
KINDS = (
    ALL_REDUCE,
    ALL_GATHER,
    REDUCE_SCATTER,
    ALL_TO_ALL,
    SEND_RECV,
    BROADCAST,
    REDUCE,
    BARRIER,
    OTHER,
)

# (family, pattern on the kernel name); the first match names the family.
_KERNEL_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rccl", re.compile(r"^rccl|rcclGenericKernel")),
    ("nccl", re.compile(r"^nccl|ncclKernel|ncclDevKernel")),
    ("hccl", re.compile(r"^hccl")),
    ("deepep", re.compile(r"deep_ep::")),
    # The DeepEP kernel family under another namespace (a fork renamed `deep_ep::` to
    # `dpsk::ep::`; the MoE trace then showed 46% of its kernel time as compute): its
    # dispatch/combine/notify kernels inside an `ep`, `internode` or `intranode` scope. The
    # scope is required: a MoE token-dispatch permute kernel (`moe::dispatch_kernel`) is
    # compute.
    (
        "deepep",
        re.compile(
            r"(?:^|[\s:])(?:ep|internode|intranode|internode_ll|intranode_ll)::"
            r"(?:\w+::)*(?:cached_)?(?:notify(?:_dispatch|_combine)?|dispatch|combine)\b"
        ),
    ),
    # NVSHMEM and its InfiniBand GPUDirect Async transport: one-sided puts/gets that DeepEP,
    # pplx and Triton-distributed kernels move the tokens with.
    ("nvshmem", re.compile(r"(?:^|[\s:])(?:nvshmem|ibgda)", re.IGNORECASE)),
    ("pplx", re.compile(r"pplx::")),
    (
        "symmetric_memory",
        re.compile(
            r"multimem_all_reduce|multimem_all_gather|multimem_reduce_scatter"
            r"|one_shot_all_reduce|two_shot_all_reduce|symmetric_memory"
        ),
    ),
    ("custom_all_reduce", re.compile(r"cross_device_reduce_\d?stage|allreduce_fusion")),
    ("all_to_all", re.compile(r"all_to_all|alltoall", re.IGNORECASE)),
)
# Host ops of torch.distributed: the ProcessGroup's record_function spans (nccl:*, gloo:*,
# the backend-less c10d:: dispatcher ops), the functional collectives of torch.compile and
# DTensor, and record_param_comms (the op that carries the message sizes).
_HOST_PREFIXES = (
    "nccl:",
    "gloo:",
    "rccl:",
    "ucc:",
    "mpi:",
    "c10d::",
    "_c10d_functional::",
    "c10d_functional::",
    "record_param_comms",
)
# A functional collective's wait is the host blocking on the result, not a collective.
_HOST_NOT_COLLECTIVE = ("_c10d_functional::wait_tensor", "c10d_functional::wait_tensor")

# The collective, from any of the spellings above (matched on the name lower-cased with
# '_' and spaces removed). Order matters: reduce_scatter before reduce, all-to-all before
# the generic send/recv of the kernel that implements it.
_KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        ALL_TO_ALL,
        re.compile(r"alltoall|all2all|deepep::|pplx::|internode|intranode|dispatch|combine"),
    ),
    (REDUCE_SCATTER, re.compile(r"reducescatter")),
    (ALL_GATHER, re.compile(r"allgather|gather")),
    (ALL_REDUCE, re.compile(r"allreduce|crossdevicereduce")),
    (SEND_RECV, re.compile(r"sendrecv|send|recv|p2p")),
    (BROADCAST, re.compile(r"broadcast|bcast")),
    (BARRIER, re.compile(r"barrier")),
    (REDUCE, re.compile(r"reduce")),
)


def kernel_family(name: str) -> str | None:
    """The communication library of a GPU kernel, or None for a compute kernel."""
    for family, pattern in _KERNEL_FAMILIES:
        if pattern.search(name):
            return family
    return None


def is_comm_kernel(name: str) -> bool:
    return kernel_family(name) is not None


def is_comm_op(name: str) -> bool:
    """A host-side collective op or span (nccl:*, gloo:*, c10d::*, functional collectives,
    record_param_comms)."""
    return name.startswith(_HOST_PREFIXES) and not name.startswith(_HOST_NOT_COLLECTIVE)


def host_backend(name: str) -> str | None:
    """The backend a host op names (`gloo:all_reduce` -> gloo), None when it names none."""
    head, sep, _ = name.partition(":")
    if sep and head in ("nccl", "gloo", "rccl", "ucc", "mpi"):
        return head
    return None


def _squash(name: str) -> str:
    # The part before any argument list: `ncclKernel_AllReduce_...(ncclDevComm*, ...)`; a
    # template's arguments (`deep_ep::intranode::dispatch<...>`) keep the kernel's own name.
    # `(anonymous namespace)::` is a scope, not an argument list (the B200 trace's
    # `void (anonymous namespace)::multimem_all_reduce_kernel<...>(...)`).
    name = name.replace("(anonymous namespace)", "")
    return name.split("(", 1)[0].lower().replace("_", "").replace(" ", "")


def collective_kind(name: str, recorded: str | None = None) -> str:
    """The collective of a kernel or host op. `recorded` is the trace's own `Collective
    name` (record_param_comms / kernel args), which wins: it says all-to-all where the NCCL
    kernel says SendRecv."""
    for text in (recorded, name):
        if not text:
            continue
        squashed = _squash(text)
        for kind, pattern in _KIND_PATTERNS:
            if pattern.search(squashed):
                return kind
    return OTHER
