"""Facts on the CPU's native bf16/fp16 support, from the flags the child read
(collect/cpu_features.py): AVX512-BF16 or AMX-BF16 for bf16, AVX512-FP16 or AMX-FP16 for fp16."""

from __future__ import annotations

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
FP16_FLAGS = ("avx512_fp16", "amx_fp16")


def cpu_precision_facts(flags: list[str] | None) -> dict[str, bool | None]:
    """None when the flags were not read: absence is then unknown, not "no support"."""
    if flags is None:
        return {"cpu_native_bf16": None, "cpu_native_fp16": None}
    present = set(flags)
    return {
        "cpu_native_bf16": bool(present & set(BF16_FLAGS)),
        "cpu_native_fp16": bool(present & set(FP16_FLAGS)),
    }
