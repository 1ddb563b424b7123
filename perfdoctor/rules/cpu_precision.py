"""bf16/fp16 autocast on a CPU without native bf16/fp16 instructions.

Without AVX512-BF16/AMX-BF16 (bf16) or AVX512-FP16/AMX-FP16 (fp16), oneDNN converts and
emulates the low-precision matmuls: autocast then costs time instead of saving it (issue 24:
several times slower than fp32 there). The fix is fp32 on that CPU; the cpu-fp32 re-run
measures what it costs.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, flag, seen, text

CPU_AUTOCAST_EMULATED = "cpu-autocast-emulated"

# dtype name -> (the fact that says the CPU has it natively, the instructions it needs)
_NATIVE = {
    "bfloat16": ("cpu_native_bf16", "AVX512-BF16 or AMX-BF16"),
    "float16": ("cpu_native_fp16", "AVX512-FP16 or AMX-FP16"),
}
_ALIASES = {"bf16": "bfloat16", "half": "float16", "fp16": "float16"}


def _dtype(facts: Facts) -> str | None:
    name = text(facts, "autocast_dtype")
    if name is None:
        return None
    name = name.strip().lower().replace("torch.", "")
    return _ALIASES.get(name, name)


def check_cpu_autocast_emulated(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    if flag(facts, "autocast_used") is not True:
        return None
    device_type = text(facts, "autocast_device_type")
    if device_type is not None and device_type != "cpu":
        return None
    dtype = _dtype(facts)
    if dtype not in _NATIVE:
        return None
    fact, instructions = _NATIVE[dtype]
    if flag(facts, fact) is not False:
        return None  # native, or the flags were not read: nothing to say
    return Finding(
        rule_id=CPU_AUTOCAST_EMULATED,
        severity="warning",
        title=f"{dtype} autocast on a CPU without native {dtype} instructions",
        explanation=(
            f"The script trains on the CPU under torch.autocast(dtype=torch.{dtype}), but this "
            f"CPU has no {instructions} (its /proc/cpuinfo flags): its {dtype} matmuls are "
            "converted and emulated, which is slower than fp32, not faster. Train in fp32 on "
            "this CPU (autocast enabled=False); the cpu-fp32 re-run measures the difference."
        ),
        evidence=(
            ev("autocast_dtype", dtype),
            ev(fact, False, True, "=="),
            *seen(facts, "autocast_device_type", "step_ms_p50"),
        ),
        gain=GainEstimate(method="not estimated: the cpu-fp32 re-run measures it"),
    )


RULES = (
    Rule(
        id=CPU_AUTOCAST_EMULATED,
        title="Low-precision autocast on a CPU that emulates it",
        area="precision",
        needs=("autocast_used",),
        uses=(
            "autocast_dtype",
            "autocast_device_type",
            "cpu_native_bf16",
            "cpu_native_fp16",
            "step_ms_p50",
        ),
        thresholds={},
        source=(
            "oneDNN runs bf16 matmuls natively only with AVX512-BF16/AMX-BF16 and fp16 with "
            "AVX512-FP16/AMX-FP16 (its CPU ISA dispatch); without them it up-converts to fp32 "
            "(issue 24: several times slower than fp32). No threshold: the flags decide"
        ),
        description=(
            "CPU autocast to bf16/fp16 where /proc/cpuinfo lacks the native instructions for "
            "that dtype; recommends fp32 and measures it with the cpu-fp32 re-run."
        ),
        check=check_cpu_autocast_emulated,
        device="cpu",
        optimizations=("cpu-fp32",),
    ),
)
