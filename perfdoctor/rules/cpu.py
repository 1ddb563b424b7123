"""CPU cores: intra-op threads below the usable cores; workers competing with threads; more
DataLoader workers than the cores leave the training process."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import (
    Rule,
    cap_severity,
    compute_share,
    ev,
    is_cuda,
    num,
    pct,
    seen,
    severity_for_gain,
)
from perfdoctor.rules.machine_load import Contention, contention
from perfdoctor.rules.measurement import BUSY_MACHINE

THREADS_BELOW_CORES = "cpu-threads-below-cores"
THREADS_ABOVE_BUDGET = "cpu-threads-above-budget"
CPU_OVERSUBSCRIBED = "cpu-oversubscribed"
WORKERS_EXCEED_CORES = "dataloader-workers-exceed-cores"
# The count advised (and tried by the dataloader-workers re-run, optimize/sizing.py
# fewer_workers) for a script whose own workers leave the training process no core.
FEWER_WORKERS_TARGET = 0


def _compute_cores(facts: Facts) -> tuple[int, int, int]:
    """(usable cores, DataLoader workers, cores left for the training process's threads).

    torch's own default is the physical core count; hyperthreads rarely speed up GEMMs, so
    the usable count is the smaller of physical and logical (affinity) cores. The ranks of a
    multi-rank run share the machine's cores: each gets its share.
    """
    logical = num(facts, "cpu_cores_logical") or 1.0
    physical = num(facts, "cpu_cores_physical")
    usable = int(min(logical, physical) if physical else logical)
    usable = max(1, usable // max(1, int(num(facts, "ranks_launched") or 1)))
    workers = int(num(facts, "dataloader_num_workers") or 0)
    return usable, workers, max(1, usable - workers)


def busy_reserve(facts: Facts) -> int:
    """Cores to leave to other processes: the ones they kept busy (rounded) when that load
    is at busy-machine's limit, else none. Threads beyond the cores left are descheduled
    inside OpenMP's parallel regions and stall their team at each barrier."""
    busy = contention(facts)
    return round(busy.others) if busy is not None else 0


def thread_budget(facts: Facts) -> tuple[int, int, int, int] | None:
    """(intra-op threads the budget allows, usable cores, DataLoader workers, cores kept
    for other processes): the usable cores (the run's CPU affinity, else the logical cores;
    one rank's share) less the workers and the other processes' busy cores, at least one.
    The cpu-threads applier sets exactly this (optimize/sizing.cpu_threads_target), up or
    down. None when the cores were not observed."""
    cpu = facts.settings.get("cpu") if isinstance(facts.settings, Mapping) else None
    affinity = cpu.get("affinity_cores") if isinstance(cpu, Mapping) else None
    cores = affinity if isinstance(affinity, int) and affinity > 0 else None
    if cores is None:
        logical = num(facts, "cpu_cores_logical")
        cores = int(logical) if logical else None
    if cores is None:
        return None
    usable = max(1, cores // max(1, int(num(facts, "ranks_launched") or 1)))
    workers = int(num(facts, "dataloader_num_workers") or 0)
    reserve = busy_reserve(facts)
    return max(1, usable - workers - reserve), usable, workers, reserve


def check_threads_above_budget(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    """More intra-op threads than the cores left to them: the DataLoader's workers and other
    processes take the rest. The one direction cpu-threads-below-cores does not cover (on a
    busy 2-core machine with 4 workers, 1 thread instead of 2 ran 2.5x faster by the
    script's own clock, issue 29)."""
    threads = num(facts, "torch_num_threads")
    budget = thread_budget(facts)
    if threads is None or budget is None:
        return None
    target, usable, workers, reserve = budget
    if threads <= target:
        return None
    # Each taker with its own measured count: the reserve is rounded, and workers plus
    # reserve may pass the cores, so "N take M" with a derived M read as a contradiction
    # ("2 core(s) other processes kept busy take 1" on a public script at 1.6 busy cores).
    takers = []
    if workers:
        takers.append(f"{workers} DataLoader worker(s)")
    busy = contention(facts)
    if reserve and busy is not None:
        takers.append(f"other processes that kept {busy.others:.1f} core(s) busy")
    beside = " and ".join(takers) or "nothing else"
    return Finding(
        rule_id=THREADS_ABOVE_BUDGET,
        severity="warning",
        title=f"{threads:.0f} intra-op threads on {target} free core(s)",
        explanation=(
            f"torch runs {threads:.0f} intra-op threads on {usable} usable core(s), beside "
            f"{beside}, which leave the threads {target} core(s) at most: the threads "
            "outnumber the cores left, get descheduled inside parallel regions and wait for "
            f"each other. torch.set_num_threads({target}) fits them; the cpu-threads variant "
            "measures it (both arms under the same load)."
        ),
        evidence=(
            ev("torch_num_threads", int(threads), target, ">"),
            *seen(facts, "cpu_cores_logical", "dataloader_num_workers", "cpu_other_busy_cores"),
        ),
        gain=GainEstimate(
            method="not estimated: what contention costs varies; the cpu-threads variant "
            "measures it"
        ),
    )


def check_threads_below_cores(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    threads = num(facts, "torch_num_threads")
    if threads is None:
        return None
    usable, workers, target = _compute_cores(facts)
    if threads >= target:
        return None
    busy = contention(facts)
    if busy is not None:
        return _threads_on_busy_machine(facts, threads, target, busy)
    parallel = t["assumed_parallel_fraction"]
    gain = compute_share(facts) * parallel * (1.0 - threads / target)
    workers_note = f" ({usable} usable cores minus {workers} DataLoader workers)" if workers else ""
    return Finding(
        rule_id=THREADS_BELOW_CORES,
        # Capped: a tiny model may not scale with threads at all; the re-run decides.
        severity=cap_severity(severity_for_gain(gain, floor="warning"), "warning"),
        title=f"Training uses {threads:.0f} CPU thread(s) of {target} available",
        explanation=(
            f"torch runs intra-op work on {threads:.0f} thread(s) while {target} core(s) are "
            f"free for it{workers_note}. torch.set_num_threads({target}) lets matmuls and "
            "convolutions use them; very small models may not scale, which the re-run shows."
        ),
        evidence=(
            ev("torch_num_threads", int(threads), target, "<"),
            *seen(
                facts,
                "cpu_cores_logical",
                "cpu_cores_physical",
                "dataloader_num_workers",
                "cpu_busy_cores",
            ),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=(
                f"Amdahl with a parallel fraction of {parallel:g} (measured on a CNN here) over "
                "the non-data share of the step"
            ),
        ),
        optimizations=("cpu-threads",),
    )


def _threads_on_busy_machine(
    facts: Facts, threads: float, target: int, busy: Contention
) -> Finding:
    """The cores the script leaves idle are not free when other processes keep them busy:
    more threads then wait for the same cores (cpu-threads measured 0.25-0.30x on this
    machine under such load), so the finding stays, as information, with no change to try."""
    return Finding(
        rule_id=THREADS_BELOW_CORES,
        severity="info",
        title=(
            f"Training uses {threads:.0f} CPU thread(s) of {target}, but other processes "
            f"kept {busy.others:.1f}{busy.of_cores} cores busy"
        ),
        explanation=(
            f"torch runs intra-op work on {threads:.0f} thread(s) and the machine has "
            f"{target} core(s) for it, but other processes kept {busy.others:.1f}"
            f"{busy.of_cores} cores busy during these steps ({BUSY_MACHINE}): more threads "
            "would compete with that load for the same cores, and on a machine this busy "
            "they made steps slower, not faster. Keep the thread count while the machine is "
            f"shared; on a quiet machine torch.set_num_threads({target}) is worth a "
            "re-measure."
        ),
        evidence=(
            ev("torch_num_threads", int(threads), target, "<"),
            busy.evidence("busy machine: more threads are not advised"),
            *seen(facts, "cpu_cores_logical", "cpu_cores_physical", "dataloader_num_workers"),
        ),
        gain=GainEstimate(method="not estimated: the free cores are taken by other processes"),
    )


def _own_util(facts: Facts, logical: int) -> float | None:
    """The share of the CPU the run itself (the training process and its workers) kept
    busy: the machine's utilization less the cores other processes used. CPU that other
    jobs take is busy-machine's finding; fewer threads would not give it back."""
    util = num(facts, "cpu_util_mean_frac")
    others = num(facts, "cpu_other_busy_cores")
    if util is None or others is None or logical <= 0:
        return util
    return max(0.0, util - others / logical)


def check_oversubscribed(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    threads = num(facts, "torch_num_threads")
    usable, workers, target = _compute_cores(facts)
    logical = int(num(facts, "cpu_cores_logical") or usable)
    util = _own_util(facts, logical)
    if threads is None or util is None:
        return None
    if workers < 1 or threads + workers <= logical or util < t["cpu_saturated_frac"]:
        return None
    # Workers that alone leave the training process no core are the change to make (fewer
    # of them, dataloader-workers-exceed-cores): fewer threads beside them would contradict
    # that advice (num_workers=0 gives the threads every core back).
    beyond = workers > usable - 1
    fix = (
        f"Fewer workers (num_workers={FEWER_WORKERS_TARGET}) give the training process its "
        "cores back."
        if beyond
        else f"torch.set_num_threads({target}) leaves the workers their cores."
    )
    return Finding(
        rule_id=CPU_OVERSUBSCRIBED,
        severity="info",
        title=(
            f"{threads:.0f} compute threads and {workers} DataLoader workers share {logical} cores"
        ),
        explanation=(
            f"The run keeps {pct(util)} of the CPU busy and its training process runs "
            f"{threads:.0f} "
            f"intra-op threads next to {workers} worker processes on {logical} logical cores, "
            f"so they preempt each other. {fix}"
        ),
        evidence=(
            ev("torch_num_threads", int(threads), logical - workers, ">"),
            ev(
                "cpu_util_mean_frac",
                util,
                t["cpu_saturated_frac"],
                ">=",
                note="the run's own processes, other processes' CPU left out",
            ),
            *seen(facts, "dataloader_num_workers", "cpu_cores_logical", "cpu_other_busy_cores"),
        ),
        gain=GainEstimate(method="not estimated: contention cost varies; the re-run measures"),
        optimizations=("dataloader-workers",) if beyond else ("cpu-threads",),
    )


def check_workers_exceed_cores(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    """The script's own num_workers leaves the training process no core: the CPU budget
    (optimize/sizing.py) keeps workers + intra-op threads within the usable cores."""
    workers = num(facts, "dataloader_num_workers")
    if not workers:
        return None
    usable, _, _ = _compute_cores(facts)
    room = usable - int(t["main_process_cores"])
    if workers <= room:
        return None
    fits = FEWER_WORKERS_TARGET
    threads = num(facts, "torch_num_threads")
    beside = f" beside {threads:.0f} intra-op thread(s)" if threads is not None else ""
    who = "the thread that launches the GPU's kernels" if is_cuda(facts) else "the training"
    change = (
        "num_workers=0 loads in the training process, with no worker to hand batches over"
        if fits == 0
        else f"num_workers={fits} with torch.set_num_threads({max(1, usable - fits)}) keeps "
        "workers plus threads within the cores"
    )
    return Finding(
        rule_id=WORKERS_EXCEED_CORES,
        severity="info",
        title=f"{workers:.0f} DataLoader workers on {usable} usable core(s)",
        explanation=(
            f"The script's DataLoader runs {workers:.0f} worker processes{beside} on {usable} "
            f"usable core(s) (the smaller of physical and logical cores, this rank's share), "
            f"which leaves the training process no core of its own: busy workers preempt "
            f"{who}. {change}; the dataloader-workers re-run lowers the script's count to "
            "measure it."
        ),
        evidence=(
            ev("dataloader_num_workers", int(workers), room, ">", note=f"{usable} usable cores"),
            *seen(
                facts,
                "cpu_cores_logical",
                "cpu_cores_physical",
                "ranks_launched",
                "torch_num_threads",
                "data_wait_frac",
            ),
        ),
        gain=GainEstimate(method="not estimated: contention cost varies; a re-run measures"),
    )


RULES = (
    Rule(
        id=THREADS_ABOVE_BUDGET,
        title="CPU intra-op threads above the cores left to them",
        area="cpu",
        needs=("torch_num_threads", "cpu_cores_logical"),
        uses=("dataloader_num_workers", "cpu_other_busy_cores", "ranks_launched"),
        thresholds={},
        source=(
            "PyTorch CPU performance tuning guide (oversubscription: threads beyond the cores "
            "stall at OpenMP barriers); measured here: 1 thread instead of 2 beside 4 "
            "DataLoader workers on a busy 2-core machine, 2.5x faster (issue 29)"
        ),
        description=(
            "CPU training with torch.get_num_threads() above the usable cores less the "
            "DataLoader's workers and the cores other processes keep busy."
        ),
        check=check_threads_above_budget,
        device="cpu",
        optimizations=("cpu-threads",),
    ),
    Rule(
        id=THREADS_BELOW_CORES,
        title="CPU intra-op threads below the usable cores",
        area="cpu",
        needs=("torch_num_threads", "cpu_cores_logical"),
        uses=(
            "cpu_cores_physical",
            "dataloader_num_workers",
            "data_wait_frac",
            "cpu_busy_cores",
            "ranks_launched",
            "cpu_other_busy_cores",
        ),
        thresholds={"assumed_parallel_fraction": 0.75},
        source=(
            "PyTorch CPU performance tuning guide (intra-op threads = physical cores); "
            "parallel fraction 0.75 measured here: a small CNN ran 1.61x faster on 2 threads "
            "than 1 (an MLP of width 256 did not scale), "
            "perfdoctor/rules/threshold_measurements.md"
        ),
        description=(
            "CPU training with torch.get_num_threads() below min(physical, logical) cores "
            "(shared out among the ranks of a multi-rank run) minus DataLoader workers."
        ),
        check=check_threads_below_cores,
        device="cpu",
        optimizations=("cpu-threads",),
        # None on a busy machine: the cores it would take are other processes'.
        selects_optimizations=True,
    ),
    Rule(
        id=CPU_OVERSUBSCRIBED,
        title="DataLoader workers compete with compute threads for cores",
        area="cpu",
        needs=(
            "torch_num_threads",
            "cpu_cores_logical",
            "dataloader_num_workers",
            "cpu_util_mean_frac",
        ),
        uses=("cpu_cores_physical", "ranks_launched", "cpu_busy_cores", "cpu_other_busy_cores"),
        thresholds={"cpu_saturated_frac": 0.85},
        source=(
            "loadtune src/loadtune/heuristic.py (CPU >= 85% = saturated; caps intra-op "
            "threads when workers run)"
        ),
        description=(
            "Threads plus workers exceed the logical cores while the run's own processes "
            "saturate the CPU (other processes' load is busy-machine's)."
        ),
        check=check_oversubscribed,
        device="cpu",
        optimizations=("cpu-threads", "dataloader-workers"),
        selects_optimizations=True,
    ),
    Rule(
        id=WORKERS_EXCEED_CORES,
        title="More DataLoader workers than the cores leave the training process",
        area="cpu",
        needs=("dataloader_num_workers", "cpu_cores_logical"),
        uses=(
            "cpu_cores_physical",
            "ranks_launched",
            "torch_num_threads",
            "data_wait_frac",
            "device_is_cuda",
        ),
        thresholds={"main_process_cores": 1.0},
        source=(
            "torch/utils/data/dataloader.py check_worker_number_rationality (warns above the "
            "cpuset's cores); perfdoctor's CPU budget (optimize/sizing.py): workers + intra-op "
            "threads <= usable cores, one core kept for the training process"
        ),
        description=(
            "The script's num_workers is above the usable cores less one (min(physical, "
            "logical), this rank's share): no core is left for the training process."
        ),
        check=check_workers_exceed_cores,
        optimizations=("dataloader-workers",),
        # One cause with cpu-oversubscribed: more busy processes than cores.
        root_cause=CPU_OVERSUBSCRIBED,
    ),
)
