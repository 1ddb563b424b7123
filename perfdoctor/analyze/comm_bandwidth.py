"""Bus bandwidth of a collective and the link it runs on: the nccl-tests arithmetic.

nccl-tests (doc/PERFORMANCE.md) reports two figures per collective of `size` bytes taking
`t` seconds: algbw = size / t, and busbw = algbw x a factor that makes the figure comparable
with the hardware's per-GPU link bandwidth whatever the rank count n:

* all-reduce: 2(n-1)/n (every rank sends and receives 2(n-1)/n of the buffer in a ring);
* all-gather, reduce-scatter: (n-1)/n, with `size` the full (gathered / unreduced) buffer;
* all-to-all: (n-1)/n (the share of the buffer that leaves the rank);
* broadcast, reduce, send/recv: 1.

So busbw is what one GPU's link carried, and it compares directly with the per-direction
bandwidth of that link (LINKS below). Sizes come from kineto's `In msg nelems` /
`Out msg nelems` / `dtype` / `Group size`, recorded since torch 2.1 on record_param_comms and
since 2.2 on the NCCL kernels too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from perfdoctor.analyze.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
)

# kineto's `dtype` spellings (c10 ScalarType names) -> bytes per element.
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "uint32": 4,
    "double": 8,
    "float64": 8,
    "long": 8,
    "int64": 8,
    "uint64": 8,
    "complexfloat": 8,
    "complexdouble": 16,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "short": 2,
    "int16": 2,
    "uint16": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "int8": 1,
    "uint8": 1,
}


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of kineto's dtype name; FP8 kinds (Float8_e4m3fn, ...) are 1."""
    if not dtype:
        return None
    low = dtype.lower()
    if low.startswith("float8"):
        return 1
    return _DTYPE_BYTES.get(low)


def bus_factor(kind: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw for a collective over `ranks` ranks."""
    if ranks < 1:
        raise ValueError(f"a collective needs at least one rank, not {ranks}")
    if kind == ALL_REDUCE:
        return 2.0 * (ranks - 1) / ranks
    if kind in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (ranks - 1) / ranks
    return 1.0


def message_bytes(
    kind: str, in_nelems: int | None, out_nelems: int | None, dtype: str | None
) -> int | None:
    """nccl-tests' `size` of one collective: the gathered output of an all-gather, the
    unreduced input of a reduce-scatter, the buffer otherwise."""
    width = dtype_bytes(dtype)
    if width is None:
        return None
    if kind == ALL_GATHER:
        nelems = out_nelems if out_nelems else in_nelems
    elif kind == REDUCE_SCATTER:
        nelems = in_nelems if in_nelems else out_nelems
    else:
        nelems = max(in_nelems or 0, out_nelems or 0) or None
    if not nelems or nelems < 0:
        return None
    return nelems * width


def algbw_gbs(size_bytes: float, dur_us: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes per second, as nccl-tests prints)."""
    return size_bytes / (dur_us * 1e-6) / 1e9 if dur_us > 0 else float("nan")


def busbw_gbs(kind: str, size_bytes: float, dur_us: float, ranks: int) -> float:
    return algbw_gbs(size_bytes, dur_us) * bus_factor(kind, ranks)


# No GPU link carries more than this per direction: NVLink 5 (B200) is 900 GB/s, so 10 TB/s
# is a generous ceiling. A bus bandwidth above it (a size of 10**30 elements) is not a
# measurement; the size it came from is invalid input.
BUSBW_CEILING_GBS = 10_000.0


def plausible_busbw(kind: str, size_bytes: float, dur_us: float, ranks: int) -> bool:
    """Whether `size_bytes` moved in `dur_us` over `ranks` ranks stays under the ceiling (a
    kernel of no duration: nothing to judge, the size stays)."""
    if dur_us <= 0:
        return True
    return busbw_gbs(kind, size_bytes, dur_us, ranks) <= BUSBW_CEILING_GBS


@dataclass(frozen=True)
class Link:
    """One GPU's link to its peers, per direction."""

    name: str
    gbs: float  # GB/s per GPU, one direction: what nccl-tests' busbw is compared with
    source: str


# (pattern on deviceProperties' name, link). NVLink figures are per GPU, per direction: half
# the "total NVLink bandwidth" NVIDIA's datasheets give (they count both directions).
LINKS: tuple[tuple[re.Pattern[str], Link], ...] = (
    (
        re.compile(r"H100.*PCIe|H200 NVL", re.IGNORECASE),
        Link(
            "PCIe (gen5 x16)",
            64.0,
            "PCIe 5.0 x16: 32 GT/s x 16 lanes, 64 GB/s per direction (PCI-SIG); NVLink "
            "bridges between pairs of cards are not visible in the trace",
        ),
    ),
    (
        re.compile(r"(?i:pcie)|\bT4\b|\bL4\b|\bL40|\bA10\b|\bA10G\b|\bA30\b|\bA40\b|RTX|GeForce"),
        Link(
            "PCIe (gen4 x16)",
            32.0,
            "PCIe 4.0 x16: 16 GT/s x 16 lanes, 32 GB/s per direction (PCI-SIG); the link of "
            "PCIe cards without an NVLink bridge",
        ),
    ),
    (
        re.compile(r"V100"),
        Link(
            "NVLink 2 (V100 SXM2)",
            150.0,
            "NVIDIA Tesla V100 datasheet: NVLink 300 GB/s (6 links x 25 GB/s x 2 directions)",
        ),
    ),
    (
        re.compile(r"A800"),
        Link("NVLink 3 (A800)", 200.0, "NVIDIA A800 datasheet: NVLink 400 GB/s total"),
    ),
    (
        re.compile(r"A100"),
        Link(
            "NVLink 3 (A100 SXM)",
            300.0,
            "NVIDIA A100 datasheet: NVLink 600 GB/s (12 links x 25 GB/s x 2 directions)",
        ),
    ),
    (
        re.compile(r"H800"),
        Link("NVLink 4 (H800)", 200.0, "NVIDIA H800 SXM: NVLink 400 GB/s total"),
    ),
    (
        re.compile(r"H100|H200|GH200"),
        Link(
            "NVLink 4 (H100/H200 SXM)",
            450.0,
            "NVIDIA H100 / H200 datasheets: NVLink 900 GB/s (18 links x 25 GB/s x 2 directions)",
        ),
    ),
    (
        re.compile(r"B200|B300|GB200|GB300"),
        Link(
            "NVLink 5 (Blackwell)",
            900.0,
            "NVIDIA HGX B200 / GB200 datasheets: NVLink 1.8 TB/s per GPU (both directions)",
        ),
    ),
    (
        re.compile(r"MI300|MI325|MI308"),
        Link(
            "Infinity Fabric (MI300X)",
            448.0,
            "AMD Instinct MI300X datasheet: 7 Infinity Fabric links of 128 GB/s (64 GB/s per "
            "direction) to the other 7 GPUs of the platform",
        ),
    ),
)
# A collective over more ranks than one NVLink / Infinity Fabric domain of 8 GPUs crosses
# nodes: its link is the network adapter, which the trace does not describe.
MAX_RANKS_IN_NODE = 8


def link_for(device_name: str | None, group_size: int | None) -> Link | None:
    """The per-GPU link of a collective of `group_size` ranks on `device_name`; None when the
    device is unknown or the group spans more than one node's worth of GPUs."""
    if not device_name:
        return None
    if group_size is not None and group_size > MAX_RANKS_IN_NODE:
        return None
    for pattern, link in LINKS:
        if pattern.search(device_name):
            return link
    return None
