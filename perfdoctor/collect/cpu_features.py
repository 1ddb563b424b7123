"""The CPU's native low-precision instructions, from /proc/cpuinfo (Linux).

bf16/fp16 autocast on a CPU runs its matmuls through oneDNN, which is fast only where the
CPU has bf16/fp16 dot-product instructions (AVX512-BF16, AMX-BF16, AVX512-FP16, AMX-FP16);
elsewhere it converts and emulates, several times slower than fp32 (issue 24).
"""

from __future__ import annotations

from pathlib import Path

LOW_PRECISION_FLAGS = ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")


def native_low_precision_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str] | None:
    """The flags of LOW_PRECISION_FLAGS this CPU has ([] = none); None where the flags
    cannot be read (not Linux, no flags line), so "absent" is never guessed."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [f for f in LOW_PRECISION_FLAGS if f in present]
    return None
