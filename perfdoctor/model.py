"""Frozen dataclasses shared by every stage.

Data flows one way: RunSpec -> child -> run directory -> RunRecord -> Facts -> [Finding]
-> [Recommendation] -> [VariantResult] -> Report -> renderers. Nothing here does I/O and
nothing here imports torch: these types are the vocabulary of the pure core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Scalar = float | int | bool | str | None

StepDetection = Literal["optimizer", "backward", "time"]
Severity = Literal["critical", "warning", "info"]
# accepted: faster beyond noise, numerics within tolerance; rejected: slower, no gain worth
# having, numerics changed or not applied; undecided: the measurement could not tell (the
# reason says what was seen and what would decide it); failed: a run crashed or timed out.
Verdict = Literal["accepted", "rejected", "undecided", "failed"]
RunStatus = Literal[
    "completed",  # the plan ran to its end (perfdoctor stopped the script, or --run-to-end)
    "finished_early",  # the script ended on its own (exit 0) before the plan was done
    "script_exited",  # the script called sys.exit(n) with n != 0
    "script_crashed",  # an exception escaped the script
    "timeout",  # --timeout killed it
    "launch_failed",  # the child never got to run the script
    "interrupted",  # Ctrl-C
]


# --------------------------------------------------------------------------- run plan / spec


@dataclass(frozen=True)
class StepPlan:
    """How many optimizer steps each phase of one child run lasts."""

    warmup_steps: int = 5
    timed_steps: int = 20
    profiled_steps: int = 3  # 0 disables the profiler window

    @property
    def profiler_warmup_steps(self) -> int:
        """One untimed step between the timed and the profiled steps, where torch.profiler
        starts (its WARMUP): starting it slows that step 7-17% on small models."""
        return 1 if self.profiled_steps > 0 else 0

    @property
    def total_steps(self) -> int:
        return (
            self.warmup_steps + self.timed_steps + self.profiler_warmup_steps + self.profiled_steps
        )


@dataclass(frozen=True)
class Target:
    """What to run: `python path argv...`, `python -m module argv...`, or a launcher command
    run as written (`torchrun --nproc-per-node 2 train.py`, collect/torchrun.py)."""

    kind: Literal["script", "module", "command"]
    name: str  # script path as typed by the user, the dotted module name, or the executable
    argv: tuple[str, ...] = ()


# --------------------------------------------------------------------------- in-process A/B


@dataclass(frozen=True)
class Arm:
    """One arm: a label and the optimization ids switched on while it runs."""

    label: str
    optimizations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """A test arm measured against a reference arm (indices into ABDesign.arms)."""

    label: str  # the variant's label in the session ("anomaly-off", "stacked", ...)
    reference: int
    test: int


@dataclass(frozen=True)
class ABDesign:
    """What the parent asks of one in-process A/B child run (RunSpec.ab); the statistics
    and the stopping rule are optimize/inprocess.py's."""

    arms: tuple[Arm, ...]
    comparisons: tuple[Comparison, ...]
    block_steps: int | None = None  # counted steps per block; None: sized from the warm-up
    settle_steps: int = 1
    budget_s: float = 60.0  # measurement time (first blocks of each arm not counted)
    max_rounds: int = 200  # the most pairs a comparison gets, pooled across processes
    seed: int = 0
    # optimize/engine.py's statistic of each block: "paired-medians" or "throughput-windows".
    statistic: str = "paired-medians"
    statistic_why: str = ""  # what in the baseline's steps chose it
    # Earlier A/B child runs of the same comparisons (absolute run directories): the script
    # ended before they decided, and their pairs pool with this run's in one sequential test.
    prior_runs: tuple[str, ...] = ()
    # Blocks of engine.LONG_BLOCK_S or more (slow steps): looked at from 3 pairs, like whole
    # runs (engine.block_looks), not from 9.
    long_blocks: bool = False


@dataclass(frozen=True)
class RunSpec:
    """The only input a child gets (serialized to spec.json)."""

    label: str  # "baseline", or a variant label such as "dataloader-workers"
    target: Target
    cwd: str
    run_dir: str  # absolute path of this child's directory (<session>/<label>[/repeat-k])
    plan: StepPlan = StepPlan()
    seed: int | None = 0  # None: --no-seed
    optimizations: tuple[str, ...] = ()  # optimization ids to apply at runtime
    profile: bool = True  # open a torch.profiler window after the timed steps
    record_memory_history: bool = True  # CUDA only
    memory_history_max_entries: int = 100_000
    nvtx: bool = False
    time_window_s: float = 0.5  # step length when no optimizer and no backward is seen
    env: Mapping[str, str] = field(default_factory=dict)  # extra env for the child
    # False (the default): the script is stopped after the plan's last step. True
    # (--run-to-end): it runs to its own end, unobserved after the plan.
    run_to_end: bool = False
    # In-process A/B (optimize/inprocess.py): after the warm-up, the arms are switched
    # between steps in blocks until every comparison has ended; no profiler window.
    ab: ABDesign | None = None


# --------------------------------------------------------------------------- what a run saw


@dataclass(frozen=True)
class DeviceInfo:
    kind: Literal["cpu", "cuda"]
    name: str
    count: int = 1
    total_memory_bytes: int | None = None
    compute_capability: str | None = None  # "9.0" on Hopper
    cpu_cores_logical: int | None = None
    cpu_cores_physical: int | None = None


@dataclass(frozen=True)
class AppliedOptimization:
    """What an applier did in the child, and whether its check proved it took effect."""

    id: str
    applied: bool
    verified: bool
    detail: str  # one line: what was changed, or why it was refused


@dataclass(frozen=True)
class RunManifest:
    """What the launcher saw. Written even when the script crashes or hangs."""

    label: str
    status: RunStatus
    exit_code: int
    wall_s: float
    steps_seen: int
    step_detection: StepDetection | None
    plan_complete: bool = False
    versions: Mapping[str, str] = field(default_factory=dict)  # python, torch, cuda, perfdoctor
    device: DeviceInfo | None = None
    artifacts: Mapping[str, str] = field(default_factory=dict)  # artifact id -> relative path
    applied: tuple[AppliedOptimization, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None  # one line: exception type and message of the script's crash
    # run_schema.RUN_SCHEMA_VERSION of the perfdoctor that wrote the run; None before 2.
    schema_version: int | None = None
    # Set when perfdoctor stopped the script after its plan: {"step": the step that would
    # have begun next, "location": {"file", "line", "function"} of the user's line the stop
    # came through, when known}. None when the script ended on its own (--run-to-end).
    stopped_at: Mapping[str, Any] | None = None
    # --run-to-end: the steps the script ran in all, past its plan (steps_seen stops at the
    # plan's end); None when not counted.
    steps_run: int | None = None


@dataclass(frozen=True)
class StepRecord:
    """One training step (one iteration, whatever the number of optimizers stepped)."""

    index: int
    phase: Literal["warmup", "timed", "profiler_warmup", "profiled"]
    wall_ms: float
    data_wait_ms: float | None = None
    forward_ms: float | None = None  # host-side time in root-module forward
    backward_ms: float | None = None  # host-side time in Tensor.backward
    optimizer_ms: float | None = None  # host-side time in optimizer.step
    micro_batches: int = 1  # backward calls in this step (gradient accumulation)
    loss: float | None = None
    batch_size: int | None = None
    rss_bytes: int | None = None  # at the step's end; read at most once a millisecond
    cuda_allocated_bytes: int | None = None
    cuda_max_allocated_bytes: int | None = None
    loss_finite: bool | None = None  # False: the loss was NaN/inf (JSON stores it as null)
    # CUDA runs: from this step's start to the next one's on the GPU's clock (CUDA events);
    # the host's wall_ms is only the launch time while the host runs ahead of the GPU.
    device_ms: float | None = None
    # Host time with a torch.distributed collective in flight in this step (DDP's gradient
    # all-reduce included; collect/comm_watch.py); None in a process that ran none.
    comm_ms: float | None = None
    # In-process A/B runs: the arm this step ran in (None in the warm-up and elsewhere).
    arm: str | None = None
    # What the step held besides training (collect/loop_probes.py); absent when none.
    eval_forward_ms: float | None = None  # root forwards of a model in eval mode
    nograd_forward_ms: float | None = None  # root forwards under no_grad, model in train mode
    save_ms: float | None = None  # torch.save calls (checkpoints)
    # CPU time of the thread that ran the step (the main thread): other processes' load
    # stretches wall time, far less this (analyze/loop_account.py judges long steps by both).
    cpu_ms: float | None = None

    @property
    def step_ms(self) -> float:
        """The step's duration: device time where it was measured, else host wall time."""
        return self.device_ms if self.device_ms is not None else self.wall_ms


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's code (or a library), as the trace's Python stacks show it."""

    file: str
    line: int
    function: str = ""
    share: float | None = None  # fraction of the relevant time attributed here
    count: int | None = None  # occurrences (e.g. syncs per step) attributed here
    call: str | None = None  # what the line does, when it was seen at the call (".item()")

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}" + (f" ({self.function})" if self.function else "")
        return f"{text}: {self.call}" if self.call else text


# --------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class Facts:
    """Flat scalars with units in their names; None means "not measured".

    The names are documented in perfdoctor.analyze.fact_catalog. `locations` holds source
    lines by topic ("host_sync", "data_loading", "grad_without_backward", ...), and `settings`
    holds what the child observed of the script's configuration (DataLoader arguments,
    optimizer classes and flags, ...), both for evidence.
    """

    values: Mapping[str, Scalar]
    locations: Mapping[str, tuple[SourceLocation, ...]] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Scalar:
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None


@dataclass(frozen=True)
class Evidence:
    """One measured value, and the threshold it was compared with."""

    name: str  # a fact name
    value: Scalar
    threshold: Scalar = None
    comparison: str = ""  # ">", "<", ">=", "==", ... as the rule applied it
    unit: str = ""
    note: str = ""

    def describe(self) -> str:
        value = f"{self.value}{self.unit}"
        if self.threshold is None:
            return f"{self.name} = {value}"
        return f"{self.name} = {value} ({self.comparison} {self.threshold}{self.unit})"


@dataclass(frozen=True)
class GainEstimate:
    """What fixing a finding is expected to buy, and how the estimate was made."""

    step_time_frac: float | None = None  # expected fraction of step time saved (0..1)
    memory_bytes: int | None = None  # expected peak memory saved
    method: str = ""
    # step_time_frac is a ceiling (what the fix could buy at most, e.g. a disable'd helper's
    # eager time, whose ops still run compiled once it is traced), not an expectation.
    upper_bound: bool = False


@dataclass(frozen=True)
class Finding:
    rule_id: str  # stable kebab-case id
    severity: Severity
    title: str
    explanation: str
    evidence: tuple[Evidence, ...]
    locations: tuple[SourceLocation, ...] = ()
    optimizations: tuple[str, ...] = ()  # optimization ids that address it
    gain: GainEstimate = GainEstimate()
    related: tuple[str, ...] = ()  # rule ids merged into this headline


@dataclass(frozen=True)
class SkippedRule:
    rule_id: str
    reason: str


@dataclass(frozen=True)
class Recommendation:
    optimization_id: str
    title: str
    kind: Literal["runtime", "env", "manual"]
    risk: str
    code_change: str  # the by-hand change, as a short snippet
    addresses: tuple[str, ...]  # rule ids
    expected_gain: GainEstimate = GainEstimate()
    locations: tuple[SourceLocation, ...] = ()
    conflicts: tuple[str, ...] = ()  # one line each: what this trades against


@dataclass(frozen=True)
class LossTolerance:
    """The loss tolerance a variant (or `perfdoctor compare`'s B) is judged with, and how it
    was derived (optimize/numerics.py derive_tolerance): the catalog category of what changed,
    widened to `spread_factor` x the baseline's own run-to-run loss spread when that is larger.
    `profile` and `compare` derive and state it the same way (numerics.describe_tolerance)."""

    value: float
    category: str  # a catalog category ("exact", "tf32", ...), or "given" for an override
    category_value: float
    spread_factor: float
    baseline_spread: float  # largest loss drift between two baseline runs (0 with one run)
    baseline_runs: int  # baseline runs with losses that the spread was measured over


@dataclass(frozen=True)
class VariantResult:
    label: str
    optimizations: tuple[str, ...]
    step_ms_p50: float | None
    step_ms_p90: float | None
    speedup: float | None  # baseline_step_ms_p50 / step_ms_p50 (paired medians); > 1 faster
    speedup_noise: float | None  # half-width of the noise band on `speedup`
    peak_memory_bytes: int | None
    loss_delta: float | None  # relative loss drift against the baseline
    verdict: Verdict
    reason: str  # one line
    throughput_samples_s: float | None = None
    energy_j_per_step: float | None = None
    applied: tuple[AppliedOptimization, ...] = ()
    run_dirs: tuple[str, ...] = ()
    # Set when other processes kept the machine busy during these runs: why the verdict
    # may not hold on a quiet machine.
    low_confidence: str | None = None
    # The baseline figure shown beside this variant's: the median of the timed steps of the
    # baseline runs it was paired with, pooled as this variant's own runs are, and how.
    baseline_step_ms_p50: float | None = None
    pooled: str = ""  # e.g. "median of 40 steps over 2 runs each side"
    # step_ms_p50 and baseline_step_ms_p50 are the "paired medians": the geometric means of
    # the median steps of the paired runs on each side (this many runs each side), so that
    # speedup == baseline_step_ms_p50 / step_ms_p50 (optimize/estimate.py). The pooled
    # median of every timed step of the variant's runs, a descriptive figure, is this:
    pooled_step_ms_p50: float | None = None
    paired_runs: int = 0
    loss_tolerance: LossTolerance | None = None  # None: no loss judged (e.g. a failed run)
    # How the speed was measured: "re-runs" (alternating child runs, estimate.py) or
    # "in-process" (arms switched between steps in one child run, optimize/inprocess.py).
    method: str = "re-runs"
    interval: tuple[float, float] | None = None  # the speedup's interval, low and high
    confidence: float | None = None  # the interval's confidence
    pairs: int | None = None  # paired block medians (in-process) or paired runs
    measure_s: float | None = None  # measurement time the speed verdict took
    baseline_quartiles_ms: tuple[float, float, float] | None = None  # p25, p50, p75
    quartiles_ms: tuple[float, float, float] | None = None
    numerics: str = ""  # how the numerics were checked, against which tolerance
    load: str | None = None  # what other processes took of the machine meanwhile
    # A peel comparison: the stack against the stack without this fix (not the baseline).
    peel_of: str | None = None
    # The measurement engine (optimize/engine.py): the statistic of each pair
    # ("paired-medians" or "throughput-windows") and why it was chosen for this workload.
    statistic: str | None = None
    statistic_why: str | None = None
    processes: int | None = None  # child processes whose pairs were pooled (in-process)
    # The load the verdict holds at: cores other processes kept busy (mean over the
    # measurement; the script's own processes never count), of how many.
    load_busy_cores: float | None = None
    load_cores: int | None = None
    # The gain depends on that load: the fix gives cores back that the load contends for
    # (fewer threads on a busy machine); it may not hold on a quiet one.
    load_bound: bool = False
    # undecided only: what would decide it ("about 400 more steps", "a quieter machine").
    would_decide: str | None = None
    # dataloader-workers: the speedup the measured split predicted for the worker count, and
    # that prediction against the measurement (optimize/prediction.py).
    predicted_speedup: float | None = None
    prediction_check: str | None = None


@dataclass(frozen=True)
class BaselineSummary:
    steps_timed: int
    optimizer_steps: int
    micro_batches_per_step: float | None
    step_ms_p50: float | None
    step_ms_p90: float | None
    data_wait_frac: float | None
    step_detection: StepDetection | None
    throughput_samples_s: float | None = None
    breakdown_ms: Mapping[str, float] = field(default_factory=dict)  # data/forward/...
    peak_memory_bytes: int | None = None
    # Over every timed step of every baseline run (the A/B repeats included), the pool the
    # variants' figures come from; the figures above are the profiled (first) run's.
    pooled_step_ms_p50: float | None = None
    pooled_step_ms_p90: float | None = None
    pooled: str = ""  # e.g. "median of 40 steps over 2 runs"
    # optimizer.step(closure) (LBFGS): the closure calls counted as steps (0: none seen).
    closure_steps: int = 0


@dataclass(frozen=True)
class RankSummary:
    """One rank (one worker's trace) of a run diagnosed from traces (`perfdoctor diagnose`),
    or one training process of a perfdoctor run (analyze/rank_table.py: from its timed steps,
    `trace` is then its record directory and `comm_frac` its steps' comm_ms share).

    Step figures come from the trace's ProfilerStep spans, so they carry profiler overhead.
    `own_ms_p50` is the step less the time spent in communication kernels (NCCL kernels run
    while a rank waits for its peers): the work that is the rank's own, and the figure the
    straggler is judged by.
    """

    rank: int | None  # distributedInfo.rank, else from the file name; None when unknown
    worker: str  # the worker part of the trace file name (often <host>_<pid>)
    trace: str  # path of the trace analysed (the newest profiler window of this worker)
    steps: int
    step_ms_p50: float | None
    data_wait_ms_p50: float | None = None
    data_wait_frac: float | None = None
    gpu_busy_frac: float | None = None
    comm_frac: float | None = None  # communication share of the step (GPU side when known)
    own_ms_p50: float | None = None
    windows: int = 1  # profiler windows (trace files) found for this worker


@dataclass(frozen=True)
class Report:
    schema_version: int
    script: str
    argv: tuple[str, ...]
    exit_code: int
    status: RunStatus
    device: DeviceInfo | None
    versions: Mapping[str, str]
    baseline: BaselineSummary
    findings: tuple[Finding, ...]
    skipped_rules: tuple[SkippedRule, ...]
    recommendations: tuple[Recommendation, ...]
    variants: tuple[VariantResult, ...]
    run_dir: str
    artifacts: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    facts: Mapping[str, Scalar] = field(default_factory=dict)
    created_at: str = ""
    run_dir_bytes: int | None = None  # disk used by the session directory
    # Chart data for the renderers, plain JSON values (documented in docs/report-schema.md):
    # {"steps": {label: {"index": [], "wall_ms": [], "loss": [], "data_wait_ms": [],
    #                    "phase": []}},
    #  "breakdown_ms": {label: {"data": ms, "forward": ms, "backward": ms,
    #                           "optimizer": ms, "other": ms}},
    #  "samples": {label: {"t": [], "cpu_util": [], "run_cpu_util": [], "gpu_util": [],
    #                      "power_w": [],  # util: 0..1
    #                      "mem_used_bytes": [], "rss_bytes": []}},
    #  "memory": {label: {"t_s": [], "allocated_bytes": [], "peak_index": int}}}
    series: Mapping[str, Any] = field(default_factory=dict)
    # The GPU timeline beyond the flat facts (docs/report-schema.md `gpu`): the window, the
    # op counts and the top kernels; {} without GPU activity in the trace.
    gpu: Mapping[str, Any] = field(default_factory=dict)
    # FLOPs, MFU and the kernels' precision mix (docs/report-schema.md `compute`): the per-op
    # table, the counter's count, the peak used; {} when nothing was counted.
    compute: Mapping[str, Any] = field(default_factory=dict)
    # "run": a perfdoctor run directory; "trace": `perfdoctor diagnose` over traces recorded
    # elsewhere (no spec, no manifest, no variants; step figures are the profiled steps').
    source: Literal["run", "trace"] = "run"
    inputs: tuple[str, ...] = ()  # the trace / snapshot files a "trace" report was built from
    ranks: tuple[RankSummary, ...] = ()  # per-rank view of a multi-rank "trace" report
    # How the baseline's script ended (docs/report-schema.md `script_end`): perfdoctor stopped
    # it after the plan, {"stopped_by_perfdoctor": true, "step": 26, "location": "train.py:42
    # in main"} (location when known), or it ran to its own end, {"stopped_by_perfdoctor":
    # false, "run_to_end": true}; {} when neither is known (a crash, a "trace" report).
    script_end: Mapping[str, Any] = field(default_factory=dict)
    # Entries perfdoctor's own re-runs created in the script's log folders, removed again
    # (lightning_logs/version_3, ...), each once, relative to the script's working directory.
    removed_outputs: tuple[str, ...] = ()
    # The whole loop's wall time and whether the timed steps stand for it (docs/report-schema.md
    # `loop`, analyze/loop_account.py); {} when there were no timed steps to compare with.
    loop: Mapping[str, Any] = field(default_factory=dict)
    # fixes.patch (docs/report-schema.md `fix_patch`, optimize/fix_patch.py): the accepted
    # fixes as a diff of the user's files: "path", "root" (where it applies from), "apply"
    # (the command), "hunks" (each change with its measured gain), "lines_to_add" (fixes with
    # no source line), "text" (the file's content); {} when no fix was accepted.
    fix_patch: Mapping[str, Any] = field(default_factory=dict)
