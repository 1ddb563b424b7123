"""What a trace says about its machine and job: `deviceProperties` and `distributedInfo`.

Pure functions over the dicts as written, so every consumer reads them the same way.

Device properties come in three spellings: current kineto (`computeMajor`/`computeMinor`),
2021-era kineto (`computeProperties` with `major`/`minor`) and ROCm kineto, which writes the
same keys as CUDA but fills `computeMajor`/`computeMinor` with the gfx version: an MI250
(gfx90a) says computeMajor 9, computeMinor 0, which is not compute capability 9.0
(Hopper). The vendor is told apart by the name, the `gcnArchName` key where present, and the
wavefront size (64 on AMD's CDNA GPUs, 32 on every NVIDIA GPU).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NVIDIA = "NVIDIA"
AMD = "AMD"

_AMD_NAME = re.compile(r"\b(AMD|Radeon|Instinct|MI\d{2,3}X?)\b", re.IGNORECASE)
_NVIDIA_NAME = re.compile(
    r"NVIDIA|GeForce|Tesla|Quadro|TITAN|\b[ABHLT]\d{2,3}\b|\bRTX\b", re.IGNORECASE
)
_GFX = re.compile(r"gfx[0-9a-f]+", re.IGNORECASE)


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU of a trace's deviceProperties."""

    index: int | None  # the `id` key: the device (= pid of its GPU rows)
    vendor: str | None  # "NVIDIA", "AMD", or None when the properties do not say
    name: str | None
    memory_bytes: int | None  # totalGlobalMem
    compute_capability: tuple[int, int] | None  # NVIDIA only, e.g. (8, 0) on an A100
    gfx_arch: str | None  # AMD only, e.g. "gfx90a" when the trace names it
    gfx_version: tuple[int, int] | None  # AMD only: HIP's major/minor, e.g. (9, 0) on gfx90a
    sm_count: int | None  # numSms / multiProcessorCount (compute units on AMD)
    warp_size: int | None

    @property
    def arch(self) -> str | None:
        """sm_80 on NVIDIA, the gfx arch (or gfx<major><minor>*) on AMD."""
        if self.compute_capability is not None:
            return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"
        if self.gfx_arch is not None:
            return self.gfx_arch
        if self.gfx_version is not None:
            return f"gfx{self.gfx_version[0]}{self.gfx_version[1]}*"
        return None


@dataclass(frozen=True)
class DistributedInfo:
    """The job a trace's rank belongs to (distributedInfo)."""

    rank: int | None
    world_size: int | None
    backend: str | None  # "nccl", "gloo", ...
    nccl_version: str | None = None
    pg_count: int | None = None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value)


# A compute capability or gfx version part is a small non-negative number (CUDA 3.5 .. 12.x,
# gfx 9.0 .. 12.x): anything else (a negative computeMinor) is no version at all.
_VERSION_PART_MAX = 99


def _version_part(value: Any) -> int | None:
    found = _int(value)
    return found if found is not None and 0 <= found <= _VERSION_PART_MAX else None


def _positive(value: Any) -> int | None:
    """A count or size that only a positive number can be (SMs, warp size, memory)."""
    found = _int(value)
    return found if found is not None and found > 0 else None


def _non_negative(value: Any) -> int | None:
    found = _int(value)
    return found if found is not None and found >= 0 else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def vendor_of(props: Mapping[str, Any]) -> str | None:
    name = _str(props.get("name")) or ""
    if "gcnArchName" in props or _AMD_NAME.search(name):
        return AMD
    if _NVIDIA_NAME.search(name):
        return NVIDIA
    warp = _int(props.get("warpSize"))
    if warp == 64:
        return AMD
    if warp == 32:
        return NVIDIA
    return None


def parse_device(props: Mapping[str, Any]) -> DeviceInfo:
    """One deviceProperties / computeProperties entry -> DeviceInfo (never raises)."""
    major = _version_part(props.get("computeMajor", props.get("major")))
    minor = _version_part(props.get("computeMinor", props.get("minor")))
    version = (major, minor) if major is not None and minor is not None else None
    vendor = vendor_of(props)
    gfx_arch = None
    arch_name = _str(props.get("gcnArchName"))
    if arch_name:
        match = _GFX.search(arch_name)
        gfx_arch = match.group(0).lower() if match else None
    return DeviceInfo(
        index=_int(props.get("id")),
        vendor=vendor,
        name=_str(props.get("name")),
        memory_bytes=_positive(props.get("totalGlobalMem")),
        compute_capability=version if vendor == NVIDIA else None,
        gfx_arch=gfx_arch if vendor == AMD else None,
        gfx_version=version if vendor == AMD else None,
        sm_count=_positive(props.get("numSms", props.get("multiProcessorCount"))),
        warp_size=_positive(props.get("warpSize")),
    )


def parse_device_properties(props: Iterable[Any]) -> tuple[DeviceInfo, ...]:
    """A trace's deviceProperties list -> DeviceInfo per dict entry (others skipped)."""
    return tuple(parse_device(p) for p in props if isinstance(p, Mapping))


def gfx_arch_from_kernels(names: Iterable[str]) -> str | None:
    """The gfx arch that ROCm's Tensile GEMM kernels name (`..._ISA90a_...` -> gfx90a)."""
    isa = re.compile(r"_ISA([0-9]{2,4}[a-f]?)_")
    for name in names:
        match = isa.search(name)
        if match:
            return f"gfx{match.group(1)}"
    return None


def parse_distributed(info: Mapping[str, Any] | None) -> DistributedInfo | None:
    """distributedInfo -> DistributedInfo; None when the trace has none (or not a dict)."""
    if not isinstance(info, Mapping):
        return None
    return DistributedInfo(
        rank=_non_negative(info.get("rank")),
        world_size=_positive(info.get("world_size")),
        backend=_str(info.get("backend")),
        nccl_version=_str(info.get("nccl_version")),
        pg_count=_positive(info.get("pg_count")),
    )
