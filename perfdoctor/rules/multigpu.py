"""Multi-GPU: DataParallel, DDP without NCCL, communication share, a straggler rank."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.analyze.straggler import DEFINITION as STRAGGLER_DEFINITION
from perfdoctor.analyze.straggler import FALLBACK_DEFINITION as STRAGGLER_FALLBACK
from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules import comm_advice
from perfdoctor.rules.base import Rule, ev, flag, num, pct, seen, severity_for_gain, text
from perfdoctor.rules.measurement import BUSY_MACHINE, busy_limit

DATA_PARALLEL = "data-parallel"
DDP_WITHOUT_NCCL = "ddp-without-nccl"
COMMUNICATION_HEAVY = "communication-heavy"
RANK_STRAGGLER = "rank-straggler"


def check_data_parallel(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    devices = num(facts, "device_count")
    if flag(facts, "uses_data_parallel") is not True or devices is None:
        return None
    if devices < t["min_devices"]:
        return None
    return Finding(
        rule_id=DATA_PARALLEL,
        severity="warning",
        title=f"nn.DataParallel over {devices:.0f} GPUs: use DistributedDataParallel",
        explanation=(
            "DataParallel runs one Python thread per GPU in a single process, scatters inputs "
            "and replicates the model every step, and gathers outputs on GPU 0. "
            "DistributedDataParallel (one process per GPU, overlapped all-reduce) is faster "
            "even on one machine, as PyTorch's docs recommend."
        ),
        evidence=(
            ev("uses_data_parallel", True),
            ev("device_count", int(devices), int(t["min_devices"]), ">="),
        ),
        gain=GainEstimate(method="not estimated: depends on model size and GPU count"),
    )


def check_ddp_without_nccl(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    backend = (text(facts, "dist_backend") or "").lower()
    if flag(facts, "uses_ddp") is not True or not backend or "nccl" in backend:
        return None
    return Finding(
        rule_id=DDP_WITHOUT_NCCL,
        severity="warning",
        title=f"DDP on GPUs with the {backend} backend instead of NCCL",
        explanation=(
            f"DistributedDataParallel trains on CUDA devices but communicates through "
            f"{backend}, which stages gradients through host memory. NCCL moves them "
            "GPU-to-GPU (NVLink/PCIe/InfiniBand) and is the backend PyTorch recommends for GPUs."
        ),
        evidence=(ev("dist_backend", backend, "nccl", "!="), *seen(facts, "world_size")),
        gain=GainEstimate(method="not estimated: depends on gradient size and interconnect"),
    )


def _peer_wait_text(facts: Facts) -> str:
    wait = num(facts, "comm_peer_wait_ms_p50")
    if not wait:
        return ""
    return (
        f" Waiting for a slower rank ({wait:.1f} ms per step, see rank-straggler) is left "
        "out: a bigger batch or fewer all-reduces would not shorten it."
    )


def check_communication(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    exposed = num(facts, "gpu_comm_exposed_frac")
    gpu_comm = num(facts, "gpu_comm_frac")
    if exposed is not None and gpu_comm:
        return _exposed_gpu_communication(facts, t, exposed, gpu_comm)
    # No communication kernels on the GPU timeline (a CPU/gloo run): the host's time in the
    # collectives is what the step waits for. Part of it can be waiting for a slower rank to
    # arrive (a straggler): that is no transfer, and only the transfer counts here.
    comm = num(facts, "comm_frac")
    transfer = num(facts, "comm_transfer_frac")
    share, share_fact = (
        (transfer, "comm_transfer_frac")
        if transfer is not None
        else (
            comm,
            "comm_frac",
        )
    )
    if share is None or share <= t["comm_frac"]:
        return None
    gain = share * t["assumed_hidden"]
    return Finding(
        rule_id=COMMUNICATION_HEAVY,
        severity=severity_for_gain(gain, floor="warning"),
        title=f"Communication takes {pct(share)} of the step",
        explanation=(
            f"Collectives (all-reduce and friends) take {pct(share)} of the step on the host."
            + _peer_wait_text(facts)
            + " "
            + _COMM_ADVICE
            + (" " + compression if (compression := comm_advice.compression_text(facts)) else "")
        ),
        evidence=(
            ev(share_fact, share, t["comm_frac"], ">"),
            # comm_step_frac: the same share over the timed steps (no profiler), the ranks
            # table's communication figure.
            *seen(
                facts,
                *(("comm_frac", "comm_peer_wait_ms_p50") if share_fact != "comm_frac" else ()),
                "comm_step_frac",
                "comm_kernel_frac",
                "world_size",
                "dist_backend",
            ),
        ),
        gain=GainEstimate(
            step_time_frac=gain,
            method=f"communication share x {t['assumed_hidden']:g} (assumed hidden or saved)",
        ),
        # Accumulation and a larger batch cut the same collectives: one carries the estimate.
        optimizations=("grad-accumulation",),
    )


_COMM_ADVICE = (
    "Gradient accumulation (with DDP's no_sync() on the micro-batches between two optimizer "
    "steps) or a larger batch communicates less often per sample. Accumulation raises the "
    "effective batch, so re-check the learning rate."
)


def _exposed_gpu_communication(
    facts: Facts, t: Mapping[str, float], exposed: float, gpu_comm: float
) -> Finding | None:
    """Communication kernels the compute does not hide: the GPU does nothing else meanwhile.
    A rank's collective kernel also spins while it waits for a slower peer, so part of this
    is another rank's lateness: the wait the per-rank steps measure comes off first; without
    it, only the transfer part one rank's trace shows is promised (rules/comm_advice.py)."""
    wait = num(facts, "comm_peer_wait_frac")
    if wait:
        exposed = max(0.0, exposed - wait)
    if exposed <= t["comm_frac"]:
        return None
    overlap = num(facts, "gpu_comm_overlap_frac")
    if wait:
        # The ranks' own figures took the wait out: the rest is transfer, all of which
        # perfect overlap would hide (the bound launch-bound takes for its host wait).
        gain = comm_advice.CommGain(
            exposed,
            "exposed communication share of the GPU window: what full overlap would hide",
            "",
        )
    else:
        gain = comm_advice.exposed_gain(facts, t, exposed)
    fix = comm_advice.advice(facts)
    mix = text(facts, "comm_collective_mix")
    mix_text = f" ({mix})" if mix else ""
    overlap_text = f"; {pct(overlap)} of it overlaps compute kernels" if overlap is not None else ""
    waiting = text(facts, "comm_wait_verdict") == "waiting"
    return Finding(
        rule_id=COMMUNICATION_HEAVY,
        severity=severity_for_gain(gain.frac, floor="warning"),
        title=f"Exposed communication: {pct(exposed)} of the GPU time runs only communication "
        "kernels" + (", mostly waiting for a peer" if waiting else ""),
        explanation=(
            f"Communication kernels{mix_text} run {pct(gpu_comm)} of the GPU window"
            f"{overlap_text}, so for {pct(exposed)} of it the GPU does nothing but communicate."
            + _peer_wait_text(facts)
            + gain.wait_text
            + " "
            + fix.text
        ),
        evidence=(
            ev(
                "gpu_comm_exposed_frac",
                exposed,
                t["comm_frac"],
                ">",
                note="less the wait for a slower rank" if wait else "",
            ),
            ev("gpu_comm_frac", gpu_comm),
            *seen(
                facts,
                "gpu_comm_exposed_transfer_frac",
                "comm_transfer_share",
                "comm_wait_verdict",
                "comm_busbw_gbs_p50",
                "comm_link_gbs",
                "comm_busbw_link_frac",
                "comm_size_r",
                "comm_collective_mix",
                "comm_families",
                "comm_parallelism",
                "comm_peer_wait_frac",
                "gpu_comm_overlap_frac",
                "comm_kernel_frac",
                "world_size",
                "dist_backend",
            ),
        ),
        optimizations=fix.optimizations,
        gain=GainEstimate(step_time_frac=gain.frac, method=gain.method),
    )


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _straggler_cause(
    facts: Facts, t: Mapping[str, float], rank: float, excess: float
) -> tuple[str, tuple[str, ...]]:
    """What differs on the slow rank, from its phase medians against the fastest rank's:
    its data path, its forward (the same model and batch taking longer: the node under
    it), or its own code (host time outside data, forward and backward). The sentence and
    its fixes."""
    data, fast_data = (
        num(facts, "straggler_data_wait_ms_p50"),
        num(facts, "fastest_rank_data_wait_ms_p50"),
    )
    data_excess = _minus(data, fast_data)
    code, fast_code = num(facts, "straggler_code_ms_p50"), num(facts, "fastest_rank_code_ms_p50")
    fwd, fast_fwd = (
        num(facts, "straggler_forward_ms_p50"),
        num(facts, "fastest_rank_forward_ms_p50"),
    )
    node = num(facts, "straggler_node_rank")
    on_node = f" (node {node:.0f})" if node is not None else ""
    slower_compute = (
        fwd is not None and fast_fwd is not None and fast_fwd > 0
        and fwd / fast_fwd >= t["slow_node_forward_ratio"]
    )  # fmt: skip
    node_text = (
        f" Its forward is slower too ({fwd:.1f} ms against {fast_fwd:.1f} ms for the same "
        f"model and batch), which points at the machine under it{on_node}: check that "
        "device's clocks and temperature, other jobs sharing it, and its CPU threads."
        if slower_compute and fwd is not None and fast_fwd is not None
        else ""
    )
    if data_excess is not None and data_excess >= t["data_share_of_excess"] * excess:
        return (
            f" What differs on rank {rank:.0f} is its data loading: {data:.1f} ms per step waiting "
            f"for the DataLoader against {fast_data:.1f} ms. Give that rank's input pipeline "
            "DataLoader workers or cheaper samples, and check that the DistributedSampler "
            "shards cost the same." + node_text,
            ("dataloader-workers", "faster-data-pipeline"),
        )
    forward_excess = _minus(fwd, fast_fwd)
    if (
        slower_compute
        and forward_excess is not None
        and forward_excess >= t["forward_share_of_excess"] * excess
    ):
        # Its forward is most of the excess: no code of the script's own to move, the machine
        # (or a bigger share of the input) is what differs.
        return (
            f" What differs on rank {rank:.0f} is its compute: its forward takes {fwd:.1f} ms "
            f"against {fast_fwd:.1f} ms on the fastest rank for the same model and batch size, "
            f"which points at the machine under it{on_node}: check that device's clocks and "
            "temperature, other jobs sharing it, and its CPU threads; or at a bigger share of "
            "the input there (longer sequences, an uneven sampler).",
            (),
        )
    measured = (
        f" ({code:.1f} ms per step outside data, forward and backward against {fast_code:.1f} ms)"
        if code is not None and fast_code is not None
        else ""
    )
    return (
        f" What differs on rank {rank:.0f} is its own code{measured}: work only that rank "
        "does between two all-reduces (logging, evaluation, checkpointing, a sleep or a "
        "barrier under `if rank == ...`), or a slower optimizer step. Move it off the training "
        "step (every N steps, a background thread) or spread it over the ranks." + node_text,
        ("balance-rank-work",),
    )


def _contended_cpu_ranks(facts: Facts, t: Mapping[str, float]) -> str:
    """The caveat for CPU ranks that competed for the cores: other processes kept the
    machine busy, or the CPU was saturated during the steps (ranks, workers and other load
    together). Then the scheduler, not the rank's work, can make one rank the slower one.
    GPU ranks compute on their own devices, so CPU load does not explain their excess."""
    if flag(facts, "device_is_cuda") is True:
        return ""
    others = num(facts, "cpu_other_busy_cores")
    cores = num(facts, "cpu_cores_logical")
    util = num(facts, "cpu_util_mean_frac")
    busy = others is not None and others >= busy_limit(cores)
    saturated = util is not None and util >= t["saturated_cpu_frac"]
    if not busy and not saturated:
        return ""
    of_cores = f" of {cores:.0f}" if cores else ""
    load = (
        f"Other processes kept {others:.1f}{of_cores} cores busy during these steps "
        f"({BUSY_MACHINE})"
        if busy and others is not None
        else f"The CPU was {pct(util or 0.0)} busy during these steps"
    )
    return (
        f" {load}, and the ranks compete for those cores: a rank the scheduler gave less "
        "CPU looks like a straggler. Re-run on a quiet machine, or with fewer ranks than "
        "cores, before acting on this."
    )


def _beyond_shared_load(
    facts: Facts, t: Mapping[str, float], own: float | None, fast_own: float | None
) -> str:
    """The ranks share the machine and its load, so the load slows every rank alike: what
    it cannot do is make one rank's own work several times another's. Then the straggler is
    the rank's work, and is not demoted (the issue's planted straggler: 27 ms of own work
    against 3.5 ms at load 3, 8x). The ratio asked for grows with the share of the cores
    other processes took (x others / cores left): a scheduler that leaves the ranks little
    CPU can starve one of them for whole time slices."""
    if own is None or not fast_own:
        return ""
    ratio = own / fast_own
    others = num(facts, "cpu_other_busy_cores") or 0.0
    cores = num(facts, "cpu_cores_logical")
    left = (cores - others) if cores else None
    if left is not None and left <= 0:
        return ""
    wanted = t["beyond_shared_load_ratio"] * max(1.0, others / left if left else 1.0)
    if ratio >= wanted:
        return (
            f" The ranks share the machine and its load, which slows them alike: rank work "
            f"{ratio:.1f}x another's is more than that load explains (>= {wanted:.1g}x with "
            f"{others:.1f} cores taken by other processes), so it is the rank's own."
        )
    return _excess_in_own_code(facts, t, wanted)


def _excess_in_own_code(facts: Facts, t: Mapping[str, float], wanted: float) -> str:
    """A rank the scheduler starves is slower in every phase, its forward too; load cannot
    put the excess into one phase of one rank. When the straggler's code outside data,
    forward and backward is `wanted`x the fastest rank's, and that many times more than its
    forward is slowed (phase_concentration_ratio), the excess is the rank's own code (the
    planted straggler at 1.5 other busy cores: 21.3 ms against 1.0 ms, its forward 1.2x)."""
    code, fast_code = num(facts, "straggler_code_ms_p50"), num(facts, "fastest_rank_code_ms_p50")
    fwd, fast_fwd = (
        num(facts, "straggler_forward_ms_p50"),
        num(facts, "fastest_rank_forward_ms_p50"),
    )
    excess = num(facts, "straggler_excess_ms")
    if code is None or not fast_code or excess is None:
        return ""
    code_ratio = code / fast_code
    fwd_ratio = fwd / fast_fwd if fwd is not None and fast_fwd else 1.0
    if code - fast_code < 0.5 * excess or code_ratio < wanted:
        return ""
    if code_ratio < t["phase_concentration_ratio"] * max(1.0, fwd_ratio):
        return ""
    return (
        f" The ranks share the machine and its load, which slows a starved rank in every "
        f"phase: rank code {code_ratio:.0f}x another's while its forward runs at "
        f"{fwd_ratio:.2f}x is more than that load explains, so it is the rank's own."
    )


def _meeting(facts: Facts) -> str:
    """Where the ranks meet: the collective the trace shows most of, DDP's all-reduce else."""
    mix = text(facts, "comm_collective_mix")
    if mix and num(facts, "job_collectives_matched") is not None:
        return f"The ranks meet in their collectives every step ({mix})"
    return "Under DDP the ranks meet in the gradient all-reduce every step"


def _job_text(facts: Facts, rank: float) -> str:
    """For ranks diagnosed from their traces (analyze/job_ranks.py): how the rank was found,
    and that the report's other findings are its own trace's."""
    matched = num(facts, "job_collectives_matched")
    last = num(facts, "job_late_rank_last_arrivals")
    if matched is None or last is None:
        return ""
    untraced = num(facts, "ranks_untraced")
    partial = (
        f" {untraced:.0f} ranks of the job were not traced: one of them may hold this rank "
        "up in turn."
        if untraced
        else ""
    )
    return (
        f" Across the traces, rank {rank:.0f}'s collective kernels are the shortest at "
        f"{last:.0f} of {matched:.0f} collectives: it arrives last and waits for nobody. "
        "The other ranks' communication time is mostly this wait, so their own traces read "
        f"as communication-bound; this report diagnoses rank {rank:.0f}'s trace, and its "
        f"other findings are what holds the job up.{partial}"
    )


def check_rank_straggler(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    frac = num(facts, "straggler_excess_frac")
    rank = num(facts, "straggler_rank")
    excess = num(facts, "straggler_excess_ms")
    if frac is None or rank is None or excess is None or frac <= t["excess_frac"]:
        return None
    if excess < t["min_excess_ms"]:
        return None  # tiny steps: a fraction of a millisecond is one process's scheduling
    steps = num(facts, "rank_timed_steps_min")
    matched = num(facts, "job_collectives_matched")
    # Traced ranks: the collectives matched across them are the pattern, however few steps.
    if steps is not None and steps < t["min_timed_steps"] and matched is None:
        return None  # a rank that crashed after a step or two: one slow step is no pattern
    world = num(facts, "world_size")
    if world is not None and world <= 1:
        return None  # no process group (Hogwild trainers): nobody waits for anybody
    fastest = num(facts, "fastest_rank")
    own, fast_own = num(facts, "straggler_own_ms_p50"), num(facts, "fastest_rank_own_ms_p50")
    against = f"rank {fastest:.0f}" if fastest is not None else "the others"
    fallback = text(facts, "straggler_own_basis") == "outside_forward_backward"
    traced_job = num(facts, "job_collectives_matched") is not None
    own_work = (
        "own work is the wall time outside forward and backward: no collective time was recorded"
        if fallback
        else (
            "own work is the job's step less the rank's wait for later ranks in collectives"
            if traced_job
            else "own work is the step less the time in collectives"
        )
    )
    compared = (
        f" ({own:.1f} ms against {fast_own:.1f} ms on {against}, the fastest; {own_work})"
        if own is not None and fast_own is not None
        else f" ({own_work})"
    )
    # Traced ranks: what slows the late rank is its own trace's findings, not a guess.
    cause, fixes = ("", ()) if traced_job else _straggler_cause(facts, t, rank, excess)
    node = num(facts, "straggler_node_rank")
    where = f" (node {node:.0f})" if node is not None else ""
    contended = _contended_cpu_ranks(facts, t)
    beyond = _beyond_shared_load(facts, t, own, fast_own)
    if contended and beyond:
        contended = beyond
    return Finding(
        rule_id=RANK_STRAGGLER,
        severity=("info" if contended and not beyond else severity_for_gain(frac, floor="warning")),
        title=f"Rank {rank:.0f}{where} is a straggler: every rank waits {excess:.1f} ms per step "
        "for it",
        explanation=(
            f"{_meeting(facts)}, so all of them run "
            f"at the pace of the slowest. Rank {rank:.0f} does {excess:.1f} ms more own work "
            f"per step than the other ranks{compared}: {pct(frac)} of "
            f"the step, which the others spend waiting in the collectives (time in the "
            f"collective that is no transfer).{_job_text(facts, rank)}{cause}{contended}"
        ),
        evidence=(
            ev("straggler_excess_frac", frac, t["excess_frac"], ">"),
            ev("straggler_excess_ms", excess),
            ev(
                "straggler_rank",
                int(rank),
                note=STRAGGLER_DEFINITION + ("; " + STRAGGLER_FALLBACK if fallback else ""),
            ),
            *seen(
                facts,
                "straggler_node_rank",
                "fastest_rank",
                "straggler_own_ms_p50",
                "fastest_rank_own_ms_p50",
                "straggler_code_ms_p50",
                "fastest_rank_code_ms_p50",
                "straggler_data_wait_ms_p50",
                "fastest_rank_data_wait_ms_p50",
                "straggler_forward_ms_p50",
                "fastest_rank_forward_ms_p50",
                "straggler_backward_ms_p50",
                "fastest_rank_backward_ms_p50",
                "comm_peer_wait_ms_p50",
                "world_size",
                "job_late_rank_last_arrivals",
                "job_collectives_matched",
                "job_held_ms_per_step",
                "ranks_untraced",
                *(
                    ("cpu_other_busy_cores", "cpu_util_mean_frac", "cpu_cores_logical")
                    if contended
                    else ()
                ),
            ),
        ),
        optimizations=fixes,
        gain=GainEstimate(
            step_time_frac=frac,
            method="the straggler's excess host time per step / the ranks' median step",
        ),
    )


RULES = (
    Rule(
        id=DATA_PARALLEL,
        title="nn.DataParallel where DDP is better",
        area="multi-gpu",
        needs=("device_is_cuda", "uses_data_parallel", "device_count"),
        thresholds={"min_devices": 2.0},
        source="torch-tb-profiler profiler/data.py rule 2 (DataParallel.forward and > 1 device)",
        description="DataParallel with more than one GPU visible.",
        check=check_data_parallel,
        device="cuda",
        optimizations=("ddp-over-dataparallel",),
    ),
    Rule(
        id=DDP_WITHOUT_NCCL,
        title="DDP on GPUs without the NCCL backend",
        area="multi-gpu",
        needs=("device_is_cuda", "uses_ddp"),
        uses=("dist_backend", "world_size"),
        thresholds={},
        source="torch-tb-profiler profiler/data.py rule 3 (DDP with no nccl:* op, CC >= 3.5)",
        description="DistributedDataParallel with gloo/mpi on CUDA devices.",
        check=check_ddp_without_nccl,
        device="cuda",
        optimizations=("nccl-backend",),
    ),
    Rule(
        id=COMMUNICATION_HEAVY,
        title="Communication share of step time",
        area="multi-gpu",
        needs=("comm_frac",),
        uses=(
            "comm_transfer_frac",
            "comm_peer_wait_frac",
            "comm_peer_wait_ms_p50",
            "gpu_comm_exposed_frac",
            "gpu_comm_frac",
            "gpu_comm_overlap_frac",
            "gpu_comm_exposed_transfer_frac",
            "comm_transfer_share",
            "comm_wait_verdict",
            "comm_dtype",
            "comm_wait_reason",
            "comm_busbw_gbs_p50",
            "comm_link_gbs",
            "comm_busbw_link_frac",
            "comm_size_r",
            "comm_collective_mix",
            "comm_families",
            "comm_parallelism",
            "job_late_rank",
            "ranks_untraced",
            "comm_kernel_frac",
            "comm_step_frac",
            "world_size",
            "dist_backend",
        ),
        thresholds={"comm_frac": 0.10, "assumed_hidden": 0.5},
        source=(
            "> 10%: torch-tb-profiler profiler/data.py rule 4 (communication / step time); "
            "exposed = HTA get_comm_comp_overlap's complement on the GPU timeline; "
            "the 0.5 saving is an assumption the re-run measures, and on a GPU trace whose "
            "message sizes do not split transfer from waiting for a peer, the share of the "
            "exposed time one rank's trace may promise; transfer vs waiting: "
            "analyze/comm_wait.py (nccl-tests busbw against the link)"
        ),
        description=(
            "On a GPU trace: communication kernel time (NCCL/RCCL, DeepEP, symmetric memory) "
            "that no compute kernel overlaps, as a share of the GPU window; the gain is its "
            "transfer part. Without communication kernels: the host's time in nccl/gloo "
            "collectives as a share of the step."
        ),
        check=check_communication,
        selects_optimizations=True,
        optimizations=("grad-accumulation",),
    ),
    Rule(
        id=RANK_STRAGGLER,
        title="One rank is slower than the others (straggler)",
        area="multi-gpu",
        needs=("straggler_excess_frac", "straggler_rank", "straggler_excess_ms"),
        uses=(
            "fastest_rank",
            "straggler_own_basis",
            "straggler_own_ms_p50",
            "fastest_rank_own_ms_p50",
            "straggler_code_ms_p50",
            "fastest_rank_code_ms_p50",
            "straggler_data_wait_ms_p50",
            "fastest_rank_data_wait_ms_p50",
            "straggler_forward_ms_p50",
            "fastest_rank_forward_ms_p50",
            "straggler_backward_ms_p50",
            "fastest_rank_backward_ms_p50",
            "comm_peer_wait_ms_p50",
            "world_size",
            "straggler_node_rank",
            "rank_timed_steps_min",
            "job_collectives_matched",
            "job_late_rank_last_arrivals",
            "job_held_ms_per_step",
            "ranks_untraced",
            "device_is_cuda",
            "cpu_other_busy_cores",
            "cpu_util_mean_frac",
            "cpu_cores_logical",
        ),
        thresholds={
            "excess_frac": 0.10,
            "min_excess_ms": 1.0,
            "min_timed_steps": 3.0,
            "data_share_of_excess": 0.5,
            "forward_share_of_excess": 0.5,
            "slow_node_forward_ratio": 1.25,
            "saturated_cpu_frac": 0.9,
            "beyond_shared_load_ratio": 4.0,
            "phase_concentration_ratio": 4.0,
        },
        source=(
            "> 10% of the step: TraceML's straggler score warning, (worst rank - median rank) / "
            "typical step (traceml src/traceml/diagnostics/step_time/policy.py, 0.10 / 0.20); "
            "critical from 20% by the shared gain ladder; data-bound when the data wait "
            "explains at least half of the excess (a majority, as TraceML's input vs compute "
            "straggler split); a slower node when the same forward takes >= 1.25x as long "
            "there (a choice here, above the few-percent run-to-run spread of a CPU forward), "
            "named as the cause when that forward explains at least half of the excess (the "
            "same majority); "
            "at least 1 ms per step: below that, a balanced 2-rank gloo run on a shared 2-core "
            "machine read 0.4 ms (11% of a 3.5 ms step), one process's scheduling, not work; "
            "at least 3 timed steps on every rank (a choice here: a 2-rank run whose rank 1 "
            "crashed after one timed step fired on that one step's 12.5 ms of data wait); "
            "only a caveat (info) on CPU ranks when busy-machine's limit is crossed or the CPU "
            "is >= 90% busy: a balanced 2-rank gloo run on this 2-core machine at load 10 "
            "(2026-11-28) named rank 1 a straggler by 11.5 ms (89% of the step) with the CPU "
            "100% busy; "
            "not demoted when the straggler's own work is >= 4x the fastest rank's, times "
            "other processes' cores / the cores they left (load the ranks share slows them "
            "alike; the issue's planted straggler was 8x at one other busy core of 2), or "
            "when its code outside data, forward and backward is that many times the "
            "fastest rank's and >= 4x more than its forward is slowed (a starved rank is "
            "slower in every phase: the planted straggler at 1.5 other busy cores read "
            "21.3 ms against 1.0 ms there, its forward 1.2x, its own work only 3.7x)"
        ),
        description=(
            "A rank whose own work per step (its step less its time in collectives, where "
            "the others wait for it) exceeds the other ranks' median: multi-rank runs only."
        ),
        check=check_rank_straggler,
        selects_optimizations=True,
        optimizations=("dataloader-workers", "faster-data-pipeline", "balance-rank-work"),
        multi_rank=True,
    ),
)
