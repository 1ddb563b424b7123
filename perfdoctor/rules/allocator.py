"""Device memory allocation in the step: the caching allocator off, emptied in the loop, or
growing its pool.

PyTorch's caching allocator keeps freed blocks for reuse, so a steady step makes no
cudaMalloc/cudaFree (hipMalloc/hipFree) calls at all. When it does, each free synchronizes
the device and each malloc is a driver call of tens of µs to ms. Three causes, each with its
own fix: PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING (caching off: unset
it), `torch.cuda.empty_cache()` inside the loop (remove it), and a pool that keeps growing or
is freed to retry failed allocations (fragmentation: expandable segments).
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, severity_for_gain

ALLOCATOR_CHURN = "allocator-churn"


# What the finding shows beside its measured share: the rule reads them, the evidence lists them.
_CONTEXT_FACTS = (
    "alloc_call_frac",
    "alloc_call_count",
    "alloc_syncing_free_count",
    "alloc_calls_per_step",
    "alloc_call_ms_per_step",
    "empty_cache_call_count",
    "caching_allocator_disabled",
    "device_alloc_count",
)


def check_allocator_churn(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    disabled = flag(facts, "caching_allocator_disabled") is True
    idle = num(facts, "gpu_idle_alloc_frac")
    host = num(facts, "alloc_call_frac")
    share = idle if idle is not None else host
    calls = num(facts, "alloc_call_count") or 0.0
    frees = num(facts, "alloc_syncing_free_count") or 0.0
    empty = num(facts, "empty_cache_call_count") or 0.0
    big = share is not None and share >= t["share_frac"]
    emptied = empty > 0 and share is not None and share >= t["empty_cache_frac"]
    if not (disabled or big or emptied):
        return None
    share_text = (
        f"{pct(share)} of the GPU window idles while the host is in malloc/free"
        if idle is not None and share is not None
        else f"the host spends {pct(share)} of the steps in malloc/free"
        if share is not None
        else "malloc/free calls were not traced"
    )
    counts = f" ({calls:.0f} calls, {frees:.0f} of them frees that synchronize the device)"
    optimizations: tuple[str, ...] = ()
    if disabled:
        optimizations = ("keep-allocator-caching",)
        cause = "the caching allocator is turned off"
        fix = (
            "unset PYTORCH_NO_CUDA_MEMORY_CACHING (PYTORCH_NO_HIP_MEMORY_CACHING on ROCm): "
            "with caching off every tensor is a cudaMalloc and every free a device-wide "
            "synchronizing cudaFree"
        )
    elif empty > 0:
        cause = f"torch.cuda.empty_cache() is called in the loop ({empty:.0f}x)"
        fix = (
            "remove torch.cuda.empty_cache() from the training loop: it returns the cache to "
            "the driver, so the next step pays cudaMalloc again and each cudaFree "
            "synchronizes the device; if memory is tight, set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True instead"
        )
        optimizations = ("no-empty-cache-in-loop", "expandable-segments")
    elif frees >= t["storm_frees"]:
        optimizations = ("keep-allocator-caching", "no-empty-cache-in-loop")
        cause = "the caching allocator is off or emptied every step"
        frames = num(facts, "trace_python_frames")
        unseen = (
            "the trace's Python frames do not show it either"
            if frames
            else "the trace has no Python frames to show it"
        )
        fix = (
            "look for PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING in the "
            "environment (unset it) and for torch.cuda.empty_cache() in the loop (remove it; "
            f"{unseen}): a steady step frees nothing back to the driver"
        )
    else:
        cause = "a few long device allocations and frees"
        fix = (
            "the allocator grew its pool or freed its cache to retry an allocation that did "
            "not fit (fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets "
            "segments grow instead); at the start of a trace, a cudaFree can also be CUDA "
            "context set-up or cuDNN benchmarking workspaces: profile steps after warm-up"
        )
        optimizations = ("expandable-segments",)
    steady = cause != "a few long device allocations and frees"
    gain = share if steady and share is not None else None
    return Finding(
        rule_id=ALLOCATOR_CHURN,
        severity=severity_for_gain(share, floor="warning") if steady else "warning",
        title=f"Device memory allocation in the step: {cause}",
        explanation=f"{share_text}{counts if calls else ''}. Cause: {cause}. Fix: {fix}.",
        evidence=(
            *(() if idle is None else (ev("gpu_idle_alloc_frac", idle, t["share_frac"], ">="),)),
            *seen(facts, *_CONTEXT_FACTS),
        ),
        optimizations=optimizations,
        gain=GainEstimate(
            step_time_frac=gain,
            method="the GPU's idle share while the host is in malloc/free: a steady step "
            "makes none of these calls"
            if gain is not None
            else "not estimated: set-up or pool growth, not a per-step cost",
        ),
    )


RULES = (
    Rule(
        id=ALLOCATOR_CHURN,
        title="Device malloc/free in the step (caching allocator off or emptied)",
        area="memory",
        needs=("device_is_cuda",),
        uses=("gpu_idle_alloc_frac", "trace_python_frames", *_CONTEXT_FACTS),
        thresholds={"share_frac": 0.05, "empty_cache_frac": 0.01, "storm_frees": 50.0},
        source=(
            "5%: the GAIN_WARNING step of the severity ladder (TF-xprof's moderately-bound "
            "cut-off), as for the other idle causes; 1% with empty_cache seen: any per-step "
            "empty_cache is a mistake PyTorch's docs warn against (notes/cuda.html, 'Memory "
            "management'); 50 syncing frees: far above the handful a pool growth or an OOM "
            "retry makes (release_cached_blocks frees each cached segment once), where the "
            "1,360-hipFree trace of issue 22 sits"
        ),
        description=(
            "cudaMalloc/cudaFree (hipMalloc/hipFree, cuMem*/hipMem*) and empty_cache in the "
            "step, or the caching allocator turned off in the environment: names the cause "
            "and its fix."
        ),
        check=check_allocator_churn,
        selects_optimizations=True,
        device="cuda",
        optimizations=("keep-allocator-caching", "no-empty-cache-in-loop", "expandable-segments"),
    ),
)
