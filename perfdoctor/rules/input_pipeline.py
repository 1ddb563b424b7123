"""Input pipeline: DataLoader-bound steps, pageable host-to-device copies, CPU-made tensors."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate, Severity
from perfdoctor.rules.base import (
    Rule,
    ev,
    flag,
    is_cuda,
    locations,
    num,
    pct,
    seen,
    severity_for_gain,
    where,
)
from perfdoctor.rules.cpu import FEWER_WORKERS_TARGET, _compute_cores
from perfdoctor.rules.machine_load import contention, load_sentence

INPUT_BOUND = "input-bound"
PAGEABLE_HTOD = "pageable-htod-copies"
CPU_TENSOR_TO_DEVICE = "cpu-tensor-to-device"

_DATALOADER_SETTINGS = (
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_prefetch_factor",
    "dataloader_persistent_workers",
    "dataloader_is_iterable",
)


def _settings_line(facts: Facts) -> str:
    workers = facts.get("dataloader_num_workers")
    if workers is None:
        return ""
    parts = [f"num_workers={workers}"]
    for name, label in (
        ("dataloader_pin_memory", "pin_memory"),
        ("dataloader_prefetch_factor", "prefetch_factor"),
        ("dataloader_persistent_workers", "persistent_workers"),
    ):
        if facts.get(name) is not None:
            parts.append(f"{label}={facts.get(name)}")
    built = locations(facts, "dataloader_construct", limit=1)
    at = f" built at {built[0]}" if built else ""
    return f" The DataLoader{at} runs with " + ", ".join(parts) + "."


# Library frames of a batch's hand-off from a worker process to the training process: the
# pipe, the tensors' shared-memory file descriptors passed over a socket, their rebuild.
_HANDOFF_FILES = (
    "multiprocessing/connection.py",
    "multiprocessing/reduction.py",
    "multiprocessing/resource_sharer.py",
    "multiprocessing/queues.py",
    "torch/multiprocessing/reductions.py",
    "torch/_utils.py",
)


def handoff_share(facts: Facts) -> float | None:
    """The share of the data wait spent in the hand-off of batches from the workers (the
    trace's top data-loading lines in _HANDOFF_FILES: a lower bound), or None without lines."""
    locs = facts.locations.get("data_loading", ())
    shares = [loc for loc in locs if loc.share is not None]
    if not shares:
        return None
    return sum(loc.share or 0.0 for loc in shares if loc.file.endswith(_HANDOFF_FILES))


def _handoff_advice(facts: Facts, workers: float, room: int, handoff: float | None) -> str:
    """The wait of a loader whose workers leave the training process no core: the hand-off."""
    cores = room + 1
    named = (
        f" ({pct(handoff)} of the wait in multiprocessing's pipe and file-descriptor passing "
        "and the tensors' rebuild)"
        if handoff
        else ""
    )
    return (
        f"Its {workers:.0f} workers on {cores} usable core(s) leave the training process no "
        "core of its own, so what each step waits for is the hand-off of a batch from a "
        f"worker{named}: pickling, each tensor's shared memory passed as a file descriptor "
        "over a socket, and workers scheduled beside the training threads. More workers add "
        "to that; a cheaper __getitem__ does not remove it. Fewer workers are the change to "
        f"measure: num_workers={FEWER_WORKERS_TARGET} loads in the training process with no "
        "hand-off at all (the dataloader-workers re-run lowers the script's count)."
    )


def _per_batch_ms(facts: Facts) -> float | None:
    """The median data wait of one batch (a step of several micro-batches fetches several)."""
    wait = num(facts, "data_wait_ms_p50")
    if wait is None:
        return None
    return wait / max(1.0, num(facts, "micro_batches_per_step") or 1.0)


# Datasets whose rows are slices of tensors held in memory: a list of indices fetches a whole
# batch in one indexing call per tensor (torch.utils.data: TensorDataset, StackDataset of them).
IN_MEMORY_DATASETS = ("TensorDataset", "StackDataset")


def in_memory_rows(facts: Facts) -> bool:
    """The training DataLoader batches rows (batch_size set) of an in-memory tensor dataset."""
    return (
        facts.get("dataloader_dataset_class") in IN_MEMORY_DATASETS
        and facts.get("dataloader_batch_size") is not None
        and flag(facts, "dataloader_is_iterable") is not True
    )


def _usable_cores(facts: Facts) -> int:
    usable, _, _ = _compute_cores(facts)
    return usable


def check_input_bound(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    wait = num(facts, "data_wait_frac")
    if wait is None or wait <= t["warning_frac"]:
        return None
    workers = num(facts, "dataloader_num_workers")
    # From a trace alone the count is unknown, but the iterator class says whether workers run.
    multiprocess = flag(facts, "dataloader_multiprocess")
    cpu_util = num(facts, "cpu_util_mean_frac")
    # With num_workers=0 the busy CPU is the training itself, so workers still help; a CPU
    # pegged while workers already run means the data code itself is too expensive.
    cpu_saturated = bool(workers) and cpu_util is not None and cpu_util >= t["cpu_saturated_frac"]
    iterable = flag(facts, "dataloader_is_iterable") is True
    optimizations: list[str] = []
    advice: str
    busy = contention(facts)
    room = _usable_cores(facts) - 1
    handoff = handoff_share(facts)
    # Workers beyond the cores: the wait is their hand-off, whatever the load (rules/cpu.py's
    # dataloader-workers-exceed-cores says the same of the cores, this of the wait).
    exceeds = bool(workers) and workers is not None and workers > room
    if exceeds and workers is not None:
        advice = _handoff_advice(facts, workers, room, handoff)
        optimizations.append("dataloader-workers")
        if busy is not None:
            advice += load_sentence(busy)
    elif in_memory_rows(facts):
        # Rows of tensors already in memory: the wait is per-row indexing and collate, work
        # a worker process would do the same way and then hand over through shared memory.
        per_batch = _per_batch_ms(facts)
        cost = f" ({per_batch:.2f} ms per batch)" if per_batch is not None else ""
        advice = (
            f"The dataset is a {facts.get('dataloader_dataset_class')} of tensors already in "
            f"memory, so the wait{cost} is the DataLoader fetching each row on its own "
            "(__getitem__ once per sample) and collate stacking them again: worker processes "
            "would do the same work and add a copy through shared memory per batch. Index "
            "whole batches instead: a BatchSampler passed as sampler= with batch_size=None "
            "hands the dataset a list of indices and TensorDataset gathers the batch in one "
            "indexing call per tensor (or slice the tensors with a shuffled index yourself)."
        )
        optimizations.append("index-whole-batches")
    elif busy is not None:
        # Workers starved by other processes wait for cores, not for their own code: more
        # workers take more of the same cores, and a cheaper __getitem__ may not be the cause.
        who = f"its {workers:.0f} workers" if workers else "the training process"
        advice = (
            f"The batches are prepared by {who}, which shared the CPU with other "
            "processes: part of this wait is the load, not the data code, so neither more "
            "workers nor cheaper data code is advised from this run." + load_sentence(busy)
        )
    elif cpu_saturated:
        advice = (
            f"The CPU is already {pct(cpu_util or 0.0)} busy with {workers:.0f} workers, so "
            "more workers will not help: "
            "make the Dataset/collate code cheaper (cache decoded samples, vectorise, move "
            "augmentation to the GPU)."
        )
    elif workers is None and multiprocess is None:
        # Nothing says how the DataLoader runs: advise both ways, assert neither.
        advice = (
            "How many DataLoader workers run is not known here: with num_workers=0, worker "
            "processes would prepare the next batches while the model trains; with workers "
            "already, add more or raise prefetch_factor, or make the Dataset/collate code "
            "cheaper."
        )
        optimizations.append("dataloader-workers")
    elif workers is None and multiprocess:
        advice = (
            "The DataLoader already runs worker processes (the trace shows "
            "_MultiProcessingDataLoaderIter) and they do not keep up: add workers or raise "
            "prefetch_factor, or make the Dataset/collate code cheaper."
        )
        optimizations.append("dataloader-workers")
    elif (
        not workers
        and (per_batch := _per_batch_ms(facts)) is not None
        and (per_batch < t["handoff_ms"])
    ):
        # Cheaper in-process than a worker's hand-off would be: workers only move the cost.
        advice = (
            f"Loading runs in the training process (num_workers=0) and takes "
            f"{per_batch:.2f} ms per batch, less than receiving a batch from a worker "
            f"process costs the training process (~{t['handoff_ms']:g} ms: the pipe, the "
            "tensors' shared memory passed as file descriptors, their rebuild), so workers "
            "would not shorten the wait. Make the Dataset's __getitem__/collate cheaper "
            "instead: build the tensors once (in __init__) and index them, or fetch a "
            "whole batch per call with a batch sampler."
        )
    elif not workers:
        advice = "Loading runs in the training process (num_workers=0): worker processes "
        advice += "would prepare the next batches while the model trains."
        if iterable:
            advice += (
                " The dataset is an IterableDataset: shard it with get_worker_info() first, "
                "or each worker yields the full stream."
            )
        optimizations.append("dataloader-workers")
    else:
        advice = "The workers do not keep up: add workers or raise prefetch_factor."
        optimizations.append("dataloader-workers")
    if is_cuda(facts) and flag(facts, "dataloader_pin_memory") is False:
        optimizations.append("pin-memory")
    if exceeds or "index-whole-batches" in optimizations:
        pass  # neither takes cores: advised on a busy machine too
    elif busy is None:
        optimizations.append("faster-data-pipeline")
    else:
        optimizations = [o for o in optimizations if o != "dataloader-workers"]
    locs = locations(facts, "data_loading")
    all_locs = locations(facts, "data_loading", "dataloader_construct", limit=6)
    wait_ms = num(facts, "data_wait_ms_p50")
    gain, method = wait, "data wait share of step time, assuming workers hide it fully"
    if exceeds and handoff:
        # Fewer workers remove the hand-off but load in-process again: the hand-off lines'
        # share of the wait is the estimate (makemore: 28-33% of a 1.2-1.3 ms wait named,
        # 0.4-0.5 ms saved by num_workers=0, benchmarks/README.md).
        gain = wait * handoff
        method = "data wait share x its hand-off lines' share (fewer workers load in-process)"
    per_step = f" ({wait_ms:.1f} ms per step at the median)" if wait_ms is not None else ""
    if facts.get("step_timing_source") == "profiled_steps":
        per_step += " over the trace's profiled steps (its DataLoader spans)"
    return Finding(
        rule_id=INPUT_BOUND,
        # A share the load inflated is not critical (rules/machine_load.py).
        severity=_severity(wait, gain, busy is not None, t),
        title=f"Input-bound: {pct(wait)} of each step waits for the DataLoader",
        explanation=(
            f"The training loop waited for the next batch {pct(wait)} of the step time{per_step}"
            f", above the {pct(t['warning_frac'])} at which torch-tb-profiler flags input "
            f"loading.{_settings_line(facts)} {advice}{where(locs)}"
        ),
        evidence=(
            ev("data_wait_frac", wait, t["warning_frac"], ">"),
            *seen(
                facts,
                "data_wait_ms_p50",
                *_DATALOADER_SETTINGS,
                "dataloader_dataset_class",
                "dataloader_multiprocess",
                "cpu_util_mean_frac",
                "step_timing_source",
            ),
            *((busy.evidence("busy machine: workers and threads starved"),) if busy else ()),
        ),
        locations=all_locs,
        optimizations=tuple(optimizations),
        gain=GainEstimate(step_time_frac=gain, method=method),
    )


def _severity(wait: float, gain: float, busy: bool, t: Mapping[str, float]) -> Severity:
    """By the wait share; where the fix saves only part of it (the hand-off), by that part."""
    if gain < wait:
        by_gain = severity_for_gain(gain)
        return "warning" if busy and by_gain == "critical" else by_gain
    return "critical" if wait >= t["critical_frac"] and not busy else "warning"


def check_pageable_htod(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    pageable = num(facts, "pageable_htod_frac")
    htod_ms = num(facts, "memcpy_htod_ms_per_step")
    step_ms = num(facts, "step_ms_p50")
    if pageable is None or htod_ms is None or not step_ms:
        return None
    htod_share = htod_ms / step_ms
    if pageable < t["pageable_frac"] or htod_share < t["min_htod_step_frac"]:
        return None
    gain = htod_share * t["assumed_copy_saving"]
    locs = locations(facts, "htod_copy")
    return Finding(
        rule_id=PAGEABLE_HTOD,
        severity=severity_for_gain(gain),
        title=f"Host-to-device copies from pageable memory ({pct(htod_share)} of the step)",
        explanation=(
            f"{pct(pageable)} of the bytes copied to the GPU come from pageable host memory; "
            f"those copies take {htod_ms:.2f} ms per step ({pct(htod_share)}) and block the "
            "host, so `non_blocking=True` cannot overlap them. Pinned batches "
            "(DataLoader pin_memory=True) plus `.to(device, non_blocking=True)` copy faster and "
            f"overlap with compute.{where(locs)}"
        ),
        evidence=(
            ev("pageable_htod_frac", pageable, t["pageable_frac"], ">="),
            ev(
                "memcpy_htod_ms_per_step",
                htod_ms,
                note=f"{pct(htod_share)} of step_ms_p50 (min {pct(t['min_htod_step_frac'])})",
                unit=" ms",
            ),
            *seen(facts, "pageable_htod_count_per_step", "dataloader_pin_memory"),
        ),
        locations=locs,
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"HtoD copy share of the step x {t['assumed_copy_saving']:g}, assuming pinned, "
                "asynchronous copies save that part of the copy time"
            ),
        ),
    )


def check_cpu_tensor_to_device(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    count = num(facts, "tensor_to_device_per_step")
    if count is None or count < t["min_per_step"]:
        return None
    locs = locations(facts, "tensor_to_device")
    return Finding(
        rule_id=CPU_TENSOR_TO_DEVICE,
        severity="info",
        title=f"{count:g} tensors per step are filled on the CPU, then copied to the GPU",
        explanation=(
            "Tensors created with zeros/ones/rand/full on the CPU and moved with .to(device) "
            "every step pay an allocation, a fill and a host-to-device copy; creating them with "
            f"device=... fills them on the GPU directly (PyTorch's ExtraCUDACopyPattern)."
            f"{where(locs)}"
        ),
        evidence=(ev("tensor_to_device_per_step", count, t["min_per_step"], ">="),),
        locations=locs,
        gain=GainEstimate(method="not estimated: a copy per tensor per step; re-run measures"),
    )


RULES = (
    Rule(
        id=INPUT_BOUND,
        title="Input-bound: steps wait for the DataLoader",
        area="input",
        needs=("data_wait_frac",),
        uses=(
            "data_wait_ms_p50",
            *_DATALOADER_SETTINGS,
            "dataloader_multiprocess",
            "step_timing_source",
            "cpu_util_mean_frac",
            "device_is_cuda",
            "cpu_other_busy_cores",
            "cpu_cores_logical",
            "cpu_cores_physical",
            "ranks_launched",
            "micro_batches_per_step",
            "dataloader_dataset_class",
            "dataloader_sampler_class",
            "dataloader_batch_size",
        ),
        thresholds={
            "warning_frac": 0.05,
            "critical_frac": 0.20,
            "cpu_saturated_frac": 0.85,
            "handoff_ms": 1.0,
        },
        source=(
            "warning > 5%: torch-tb-profiler profiler/data.py (DataLoader share rule); "
            "critical >= 20%: TF-xprof op_stats_to_input_pipeline_analysis.cc (HIGHLY "
            "input-bound) and loadtune src/loadtune/heuristic.py; CPU saturated >= 85%: "
            "loadtune heuristic.py; hand-off ~1 ms per batch: the loader wait of makemore's "
            "4 workers that kept up on a quiet 2-core machine (benchmarks/README.md, 'Public "
            "scripts: the misses measured')"
        ),
        description=(
            "Share of timed step time spent inside DataLoader __next__ (from a trace alone: "
            "the DataLoader spans inside the ProfilerStep spans), with the DataLoader "
            "settings and the user's Dataset/collate lines where the loading time goes. With a "
            "saturated CPU it advises cheaper data code instead of more workers."
        ),
        check=check_input_bound,
        selects_optimizations=True,
        topics=("data_loading", "dataloader_construct"),
        optimizations=(
            "dataloader-workers",
            "pin-memory",
            "faster-data-pipeline",
            "index-whole-batches",
        ),
    ),
    Rule(
        id=PAGEABLE_HTOD,
        title="Pageable host-to-device copies (no pin_memory / non_blocking)",
        area="input",
        needs=("pageable_htod_frac", "memcpy_htod_ms_per_step", "step_ms_p50"),
        uses=("pageable_htod_count_per_step", "dataloader_pin_memory"),
        thresholds={
            "pageable_frac": 0.5,
            "min_htod_step_frac": 0.02,
            "assumed_copy_saving": 0.5,
        },
        source=(
            "pageable copies: nsys analyze cuda_memcpy_async (flags any pageable async copy) and "
            "Kineto memcpy names '(Pageable -> Device)'; perfdoctor requires >= half the HtoD "
            "bytes pageable and the copies >= 2% of the step so that a stray copy does not "
            "warn; the 0.5 saving is an assumption the re-run measures"
        ),
        description=(
            "Host-to-device copies from pageable memory are staged and synchronous; pinned "
            "memory plus non_blocking copies overlap them with compute."
        ),
        check=check_pageable_htod,
        device="cuda",
        topics=("htod_copy",),
        optimizations=("pin-memory", "non-blocking-copies"),
    ),
    Rule(
        id=CPU_TENSOR_TO_DEVICE,
        title="Tensors created on the CPU and moved to the GPU every step",
        area="input",
        needs=("tensor_to_device_per_step",),
        thresholds={"min_per_step": 1.0},
        source=(
            "torch/profiler/_pattern_matcher.py ExtraCUDACopyPattern (any occurrence); "
            "perfdoctor counts them per step"
        ),
        description="fill/zero/rand on the CPU followed by .to(cuda) of the same dtype.",
        check=check_cpu_tensor_to_device,
        device="cuda",
        topics=("tensor_to_device",),
        optimizations=("create-on-device",),
    ),
)
