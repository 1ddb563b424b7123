"""Memory: near capacity, allocator retries/OOM, barely used, fragmentation, creep per step."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import (
    Rule,
    compute_capability,
    ev,
    flag,
    locations,
    num,
    pct,
    seen,
    where,
)
from perfdoctor.rules.memory_oom import device_text, oom_request_text, other_devices_text
from perfdoctor.units import format_bytes

MEMORY_NEAR_CAPACITY = "memory-near-capacity"
ALLOCATOR_PRESSURE = "allocator-retries"
MEMORY_UNDERUSED = "memory-underused"
FRAGMENTATION = "memory-fragmentation"
GROWTH_HOST = "memory-growth-host"
GROWTH_DEVICE = "memory-growth-device"

_PRESSURE = "memory-pressure"
_CREEP = "memory-creep"
_SMALL_BATCH = "small-batch"
_PROJECTION_STEPS = 1000
_CHECKPOINT_TRADE = (
    "Activation checkpointing trades memory for time: it recomputes each block's forward in "
    "backward (about a third more compute); gradient accumulation keeps the effective batch "
    "with smaller micro-batches."
)

_PRESSURE_OPTIMIZATIONS = (
    "activation-checkpointing",
    "amp-bf16",
    "amp-fp16",
    "grad-accumulation",
    "expandable-segments",
)


def _pressure_fixes(facts: Facts, t: Mapping[str, float]) -> tuple[tuple[str, ...], int | None]:
    """Optimizations for a memory-bound run, and the activation memory they could free."""
    fixes: list[str] = []
    activations = num(facts, "activation_bytes_frac")
    peak = num(facts, "peak_allocated_bytes")
    if activations is None or activations >= t["activation_frac"]:
        fixes.append("activation-checkpointing")
    if flag(facts, "autocast_used") is False:
        cc = compute_capability(facts)
        fixes.append("amp-bf16" if cc is not None and cc >= 8.0 else "amp-fp16")
    fixes.append("grad-accumulation")
    frag = num(facts, "fragmentation_frac")
    if frag is not None and frag >= t["fragmentation_frac"] and not _expandable_on(facts):
        fixes.append("expandable-segments")
    freed = int(peak * activations * 0.5) if peak is not None and activations is not None else None
    return tuple(fixes), freed


def check_near_capacity(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    frac = num(facts, "peak_allocated_frac")
    if frac is None or frac <= t["warning_frac"]:
        return None
    fixes, freed = _pressure_fixes(facts, t)
    total = num(facts, "device_total_memory_bytes")
    of_total = f" of {format_bytes(total)}" if total else ""
    locs = locations(facts, "memory_peak")
    return Finding(
        rule_id=MEMORY_NEAR_CAPACITY,
        severity="critical" if frac >= t["critical_frac"] else "warning",
        title=f"Peak memory at {pct(frac)} of the device",
        explanation=(
            f"Allocated memory peaked at {pct(frac)}{of_total}: one longer sequence or a "
            f"fragmented heap away from an out-of-memory error, and no room for a larger batch. "
            f"{_CHECKPOINT_TRADE}{where(locs)}"
        ),
        evidence=(
            ev("peak_allocated_frac", frac, t["warning_frac"], ">"),
            *seen(facts, "peak_allocated_bytes", "activation_bytes_frac", "fragmentation_frac"),
        ),
        locations=locs,
        optimizations=fixes,
        gain=GainEstimate(
            memory_bytes=freed,
            method="half the activation memory (checkpointing keeps block inputs only)",
        ),
    )


def check_allocator_pressure(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    # A snapshot alone records OOM events but not the retry count (memory_stats): an OOM
    # is enough to report, retries are counted only when measured.
    retries = num(facts, "alloc_retries")
    ooms = num(facts, "oom_events")
    if ooms is None:
        return None
    if ooms < t["min_oom_events"] and (retries is None or retries < t["min_retries"]):
        return None
    fixes, freed = _pressure_fixes(facts, t)
    if "expandable-segments" not in fixes and not _expandable_on(facts):
        fixes = (*fixes, "expandable-segments")
    oom = ooms >= t["min_oom_events"]
    on = device_text(facts)
    what = (
        f"ran out of memory {ooms:g} time(s){on}" + oom_request_text(facts)
        if oom
        else f"had to free its cache and retry cudaMalloc {retries:g} times{on}"
    )
    # An `oom` entry is the allocation that failed after the flush-and-retry: the script got
    # torch.OutOfMemoryError, which ends a run unless it is caught. Calling it a retry that
    # "stalls the step" (as a snapshot's fatal OOM once was) hides that the run died.
    cost = (
        "That is fatal, not a slowdown: the allocation still failed after the allocator "
        "freed its cache and retried, so the script got torch.OutOfMemoryError, which ends "
        "the run unless the script catches it."
        if oom
        else "Each retry synchronizes the device and releases cached blocks, which stalls the step."
    )
    return Finding(
        rule_id=ALLOCATOR_PRESSURE,
        severity="critical" if oom else "warning",
        title=f"The CUDA allocator {what}",
        explanation=(
            f"The caching allocator {what}. {cost}{other_devices_text(facts)} {_CHECKPOINT_TRADE}"
        ),
        evidence=(
            ev("oom_events", ooms, t["min_oom_events"], ">="),
            *(
                (ev("alloc_retries", retries, t["min_retries"], ">="),)
                if retries is not None
                else ()
            ),
            *seen(
                facts,
                "peak_allocated_frac",
                "fragmentation_frac",
                "oom_request_bytes",
                "oom_device_free_bytes",
            ),
        ),
        locations=locations(facts, "memory_peak"),
        optimizations=fixes,
        gain=GainEstimate(
            memory_bytes=freed,
            method="half the activation memory (checkpointing keeps block inputs only)",
        ),
    )


def check_underused(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    frac = num(facts, "peak_allocated_frac")
    busy = num(facts, "gpu_busy_frac")
    if frac is None or busy is None or frac >= t["max_used_frac"] or busy >= t["max_busy_frac"]:
        return None
    return Finding(
        rule_id=MEMORY_UNDERUSED,
        severity="info",
        title=f"Only {pct(frac)} of GPU memory is used while the GPU is busy {pct(busy)}",
        explanation=(
            f"Peak allocated memory is {pct(frac)} of the device and kernels keep the GPU busy "
            f"only {pct(busy)} of the step: a batch about {1 / max(frac, 0.01):.0f}x larger "
            "would fit and give each kernel more work. A larger batch changes the "
            "optimization (scale the learning rate and re-check convergence)."
        ),
        evidence=(
            ev("peak_allocated_frac", frac, t["max_used_frac"], "<"),
            ev("gpu_busy_frac", busy, t["max_busy_frac"], "<"),
            *seen(facts, "batch_size"),
        ),
        gain=GainEstimate(method="not estimated: depends on how kernels scale with batch"),
    )


def _expandable_on(facts: Facts) -> bool:
    """The snapshot's allocator_settings say expandable_segments is already on."""
    return flag(facts, "expandable_segments") is True


def check_fragmentation(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    frag = num(facts, "fragmentation_frac")
    reserved = num(facts, "peak_reserved_bytes")
    total = num(facts, "device_total_memory_bytes")
    if frag is None or reserved is None or not total or frag < t["fragmentation_frac"]:
        return None
    if _expandable_on(facts):
        return None  # the fix this finding proposes is already in place
    if flag(facts, "memory_cache_fragmented") is False:
        return None  # the failed request would not have fit the free blocks' total anyway
    retries = num(facts, "alloc_retries") or 0.0
    reserved_frac = reserved / total
    if reserved_frac < t["reserved_frac"] and retries < 1:
        return None
    wasted = int(frag * reserved)
    return Finding(
        rule_id=FRAGMENTATION,
        severity="warning",
        title=f"{pct(frag)} of reserved GPU memory is cached but unusable (fragmentation)",
        explanation=(
            f"At the peak, {format_bytes(wasted)} ({pct(frag)}) of the "
            f"{format_bytes(reserved)} the allocator reserved held no tensor, and the "
            f"reservation is at {pct(reserved_frac)} of the device. "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow instead of "
            "leaving gaps between fixed-size blocks."
        ),
        evidence=(
            ev("fragmentation_frac", frag, t["fragmentation_frac"], ">="),
            ev(
                "peak_reserved_bytes",
                int(reserved),
                note=f"{pct(reserved_frac)} of device (>= {pct(t['reserved_frac'])}) or retries",
            ),
            *seen(facts, "alloc_retries", "largest_free_block_frac", "expandable_segments"),
        ),
        gain=GainEstimate(memory_bytes=wasted, method="reserved minus allocated at the peak"),
    )


def _growth(
    facts: Facts,
    t: Mapping[str, float],
    rule_id: str,
    growth_facts: tuple[str, str],  # (slope per step, rise over scatter)
    size_fact: str,
    what: str,
) -> Finding | None:
    slope_fact, noise_fact = growth_facts
    steps = num(facts, "steps_timed")
    slope = num(facts, slope_fact)
    size = num(facts, size_fact)
    if steps is None or slope is None or not size or steps < t["min_steps"]:
        return None
    window = slope * steps
    frac = window / size
    if slope < t["min_slope_bytes"] or frac < t["growth_frac"]:
        return None
    over_noise = num(facts, noise_fact)
    if over_noise is not None and over_noise < t["min_rise_over_noise"]:
        return None  # the line rises less than the step-to-step scatter: not a trend
    locs = locations(facts, "memory_growth")
    projected = int(slope * _PROJECTION_STEPS)
    return Finding(
        rule_id=rule_id,
        severity="critical" if frac >= t["critical_growth_frac"] else "warning",
        title=f"{what} grows {format_bytes(slope)} every step",
        explanation=(
            f"{what} grew {format_bytes(slope)} per step, {format_bytes(window)} over "
            f"{steps:.0f} timed steps ({pct(frac)} of {format_bytes(size)}); at this rate it "
            f"adds {format_bytes(projected)} every {_PROJECTION_STEPS:,} steps until it runs "
            "out. The usual cause is keeping tensors that carry their autograd graph across "
            "steps (a loss appended to a list, outputs stored for logging): keep "
            f"loss.item() or .detach() instead.{where(locs)}"
        ),
        evidence=(
            ev(slope_fact, int(slope), int(t["min_slope_bytes"]), ">=", unit=" B"),
            ev(
                size_fact,
                int(size),
                unit=" B",
                note=f"grew {pct(frac)} over the window (>= {pct(t['growth_frac'])})",
            ),
            ev("steps_timed", int(steps), int(t["min_steps"]), ">="),
            *(
                (ev(noise_fact, round(over_noise, 1), t["min_rise_over_noise"], ">="),)
                if over_noise is not None and over_noise < 1e9
                else ()
            ),
        ),
        locations=locs,
        gain=GainEstimate(
            memory_bytes=projected,
            method=f"growth per step x {_PROJECTION_STEPS:,} steps; unbounded in a long run",
        ),
    )


def check_growth_host(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    return _growth(
        facts,
        t,
        GROWTH_HOST,
        ("rss_growth_bytes_per_step", "rss_growth_over_noise"),
        "rss_bytes_max",
        "Process memory (RSS)",
    )


def check_growth_device(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    return _growth(
        facts,
        t,
        GROWTH_DEVICE,
        ("cuda_allocated_growth_bytes_per_step", "cuda_allocated_growth_over_noise"),
        "peak_allocated_bytes",
        "CUDA allocated memory",
    )


_PRESSURE_THRESHOLDS = {"activation_frac": 0.3, "fragmentation_frac": 0.1}
_GROWTH_THRESHOLDS = {
    "min_steps": 10.0,
    "min_slope_bytes": 65536.0,
    "growth_frac": 0.01,
    "critical_growth_frac": 0.10,
    "min_rise_over_noise": 3.0,
}
_GROWTH_SOURCE = (
    "growth >= 1% of the footprint: Scalene scalene_leak_analysis.py (growth rate >= 1%); "
    "TraceML step_memory/policy.py needs a minimum step count (50; 10 here, the default plan "
    "times 20); 64 KiB/step floor: a well-tuned MLP and CNN moved RSS by <= 11 KiB/step on "
    "this CPU while a loop keeping one graph per step grew 389 KiB/step "
    "(perfdoctor/rules/threshold_measurements.md); critical at 10%: choice here; the rise "
    "over the timed steps must exceed 3x the step-to-step scatter (a 3-sigma trend): "
    "cnn_slow_dataloader.py's RSS scatters +-8 MiB per step, enough for a 1 MiB/step "
    "Theil-Sen slope over 10 steps by chance; and the growth must persist, rising in each "
    "third of the timed window (one jump or a swing with no trend is not a leak: four real "
    "scripts were flagged for those before), each third by more than the scatter, at the "
    "rate of its slowest third (warm-up that settles in the window is no leak: an HF "
    "Trainer run was flagged at ~1 MiB/step while its RSS stayed within 8 MB over 200 "
    "steps), or, for a leak served in heap-sized chunks (a few equal readings, then a "
    "jump: a kept-graph leak grew 338 -> 443 MB in 19 steps that way and read as 0), the "
    "thirds' levels climbing at a steady rate in three or more pieces that it rarely gives "
    "back; and by at least 5x the readings' resolution (analyze/growth.py "
    "GROWTH_MIN_RESOLUTIONS: RSS moves in 1 MiB arenas)"
)

RULES = (
    Rule(
        id=MEMORY_NEAR_CAPACITY,
        title="Peak GPU memory near capacity",
        area="memory",
        needs=("device_is_cuda", "peak_allocated_frac"),
        uses=(
            "peak_allocated_bytes",
            "device_total_memory_bytes",
            "activation_bytes_frac",
            "fragmentation_frac",
            "autocast_used",
            "gpu_compute_capability",
            "expandable_segments",
        ),
        thresholds={"warning_frac": 0.90, "critical_frac": 0.97, **_PRESSURE_THRESHOLDS},
        source=(
            "> 90%: torch-tb-profiler profiler/data.py rule 7 (peak allocated vs "
            "totalGlobalMem); 97% critical: TraceML step_memory/policy.py pressure bands; "
            "checkpointing when activations >= 30% of the peak: choice here"
        ),
        description=(
            "Peak allocated memory as a share of the device, with the fixes that free memory "
            "and what they cost in time."
        ),
        check=check_near_capacity,
        selects_optimizations=True,
        device="cuda",
        topics=("memory_peak",),
        optimizations=_PRESSURE_OPTIMIZATIONS,
        root_cause=_PRESSURE,
    ),
    Rule(
        id=ALLOCATOR_PRESSURE,
        title="CUDA allocator retries or out-of-memory events",
        area="memory",
        needs=("device_is_cuda", "oom_events"),
        uses=(
            "alloc_retries",
            "peak_allocated_frac",
            "fragmentation_frac",
            "activation_bytes_frac",
            "expandable_segments",
            "oom_request_bytes",
            "oom_device_free_bytes",
            "memory_device",
            "memory_devices",
            "memory_other_devices",
        ),
        thresholds={"min_retries": 2.0, "min_oom_events": 1.0, **_PRESSURE_THRESHOLDS},
        source=(
            "Composer (auto micro-batching: OOM, or num_alloc_retries increasing over >= 2 "
            "batches); torch.cuda.memory_stats num_alloc_retries / num_ooms"
        ),
        description="The allocator had to flush its cache and retry, or ran out of memory.",
        check=check_allocator_pressure,
        selects_optimizations=True,
        device="cuda",
        topics=("memory_peak",),
        optimizations=_PRESSURE_OPTIMIZATIONS,
        root_cause=_PRESSURE,
    ),
    Rule(
        id=MEMORY_UNDERUSED,
        title="GPU memory barely used while the GPU idles (batch could grow)",
        area="memory",
        needs=("device_is_cuda", "peak_allocated_frac", "gpu_busy_frac"),
        uses=("batch_size",),
        thresholds={"max_used_frac": 0.25, "max_busy_frac": 0.5},
        source=(
            "DLProf 'GPU Memory is underutilized: only 7% ... increase batch size by 4x' (a 4x "
            "batch fits below 25%); busy < 50%: torch-tb-profiler rule 5 (low GPU utilization)"
        ),
        description="Little memory used and the GPU not busy: a larger batch would fit.",
        check=check_underused,
        device="cuda",
        optimizations=("larger-batch",),
        root_cause=_SMALL_BATCH,
    ),
    Rule(
        id=FRAGMENTATION,
        title="Fragmented CUDA cache under memory pressure",
        area="memory",
        needs=(
            "device_is_cuda",
            "fragmentation_frac",
            "peak_reserved_bytes",
            "device_total_memory_bytes",
        ),
        uses=(
            "alloc_retries",
            "largest_free_block_frac",
            "expandable_segments",
            "memory_cache_fragmented",
        ),
        thresholds={"fragmentation_frac": 0.25, "reserved_frac": 0.90},
        source=(
            "PyTorch CUDA semantics docs (expandable_segments against fragmentation); "
            "pressure at >= 90% reserved mirrors tb_plugin's 90% capacity rule; 25% unusable: "
            "choice here (harmless gaps are not reported without pressure)"
        ),
        description="Reserved-but-unallocated memory at the peak when memory is tight.",
        check=check_fragmentation,
        device="cuda",
        optimizations=("expandable-segments",),
        root_cause=_PRESSURE,
    ),
    Rule(
        id=GROWTH_HOST,
        title="Process memory grows step after step",
        area="memory",
        needs=("steps_timed", "rss_growth_bytes_per_step", "rss_bytes_max"),
        uses=("rss_growth_over_noise",),
        thresholds=dict(_GROWTH_THRESHOLDS),
        source=_GROWTH_SOURCE,
        description=(
            "RSS slope over the timed steps relative to the process size: tensors kept with "
            "their graphs, growing caches."
        ),
        check=check_growth_host,
        topics=("memory_growth",),
        optimizations=("detach-logged-tensors",),
        root_cause=_CREEP,
    ),
    Rule(
        id=GROWTH_DEVICE,
        title="CUDA memory grows step after step",
        area="memory",
        needs=(
            "device_is_cuda",
            "steps_timed",
            "cuda_allocated_growth_bytes_per_step",
            "peak_allocated_bytes",
        ),
        uses=("cuda_allocated_growth_over_noise",),
        thresholds=dict(_GROWTH_THRESHOLDS),
        source=_GROWTH_SOURCE,
        description="Slope of CUDA allocated memory over the timed steps relative to the peak.",
        check=check_growth_device,
        device="cuda",
        topics=("memory_growth",),
        optimizations=("detach-logged-tensors",),
        root_cause=_CREEP,
    ),
)
