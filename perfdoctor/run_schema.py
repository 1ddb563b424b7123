"""Typed schemas of the run directory's JSON files: observations.json, steps.jsonl,
progress.jsonl and samples.jsonl.

The live side (collect/) encodes through these types and the offline side (analyze/record.py)
decodes with them, so both agree on one definition instead of prose. docs/run-directory.md's
field tables are generated from them (tools/gen_run_schema_doc.py) and a unit test fails when
the two disagree.

Compatibility: every field is optional (absent = not observed) and unknown fields are ignored,
so a run written by an older or newer perfdoctor loads as long as the fields both know have
the same types. When they do not, decoding fails with one line naming the run directory's
schema version (manifest.json `schema_version`; absent before version 2) and this one's.

No torch here: both sides import this module.
"""

from __future__ import annotations

import json
from typing import Any, Union

import msgspec

from perfdoctor.model import StepRecord

# Version of the run directory's layout and schemas, written to manifest.json. 1 is every run
# recorded before the version was written (the same files, untyped).
RUN_SCHEMA_VERSION = 2


class _Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of every schema struct: keyword fields, None/absent fields left out when encoded."""


# --------------------------------------------------------------------------- observations.json


class SourceLine(_Record):
    """A place in the script that the child located itself."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    count: int | None = None  # occurrences per step (SourceLocation.count)
    call: str | None = None  # what the line does, for host-sync sites (".item()")
    calls: int | None = None  # host-sync sites: calls seen over the watched steps


class TorchSettings(_Record):
    version: str | None = None
    num_threads: int | None = None
    num_interop_threads: int | None = None
    anomaly_enabled: bool | None = None
    cudnn_enabled: bool | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    deterministic_algorithms: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    tf32_api: str | None = None  # "fp32_precision" or "allow_tf32": the only API read
    float32_matmul_precision: str | None = None
    fp32_precision_matmul: str | None = None
    fp32_precision_conv: str | None = None
    grad_enabled: bool | None = None


class CpuInfo(_Record):
    logical_cores: int | None = None
    physical_cores: int | None = None
    affinity_cores: int | None = None  # cores this process may run on
    name: str | None = None
    mhz: float | None = None  # max clock (cpufreq), else /proc/cpuinfo's current one
    isa_flags: list[str] | None = None  # vector ISA flags: "avx512f", "avx2", "fma", ...
    # Native bf16/fp16 instructions present (collect/cpu_features.py); None = unreadable
    low_precision_flags: list[str] | None = None


class ObservedDevice(_Record):
    kind: str | None = None  # "cpu" or "cuda"
    name: str | None = None
    count: int | None = None
    index: int | None = None
    total_memory_bytes: int | None = None
    compute_capability: str | float | None = None  # "9.0" on Hopper
    cuda_available: bool | None = None
    cuda_version: str | None = None


class DataLoaderInfo(_Record):
    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None
    drop_last: bool | None = None
    dataset_class: str | None = None
    dataset_length: int | None = None
    sampler_class: str | None = None
    iterable: bool | None = None  # an IterableDataset
    multiprocessing_context: str | None = None
    collate_fn: str | None = None
    timeout: float | None = None
    in_order: bool | None = None
    explicit: list[str] | None = None  # arguments the script passed
    location: SourceLine | None = None  # where the script built it
    batches: int | None = None  # batches it fed
    # Steps in which it fed a batch: a training loader feeds (about) one per step, an
    # evaluation loop many batches inside one step.
    steps_fed: int | None = None


class OptimizerInfo(_Record):
    class_name: str | None = msgspec.field(default=None, name="class")
    module: str | None = None
    impl: str | None = None  # "fused", "foreach", "single_tensor"
    fused: bool | None = None
    foreach: bool | None = None
    param_count: int | None = None
    param_tensors: int | None = None  # tensors it steps (foreach batches them)
    param_groups: int | None = None
    lr: float | str | None = None  # str: a tensor learning rate, as its str()
    steps: int | None = None
    location: SourceLine | None = None


class RootModuleInfo(_Record):
    """A root module: one whose forward the script calls itself."""

    class_name: str | None = msgspec.field(default=None, name="class")
    wrapper: str | None = None  # OptimizedModule, DistributedDataParallel, ...
    device: str | None = None
    dtype: str | None = None
    param_count: int | None = None
    trainable_param_count: int | None = None
    conv_count: int | None = None
    conv_bias_before_bn: int | None = None
    channels_last: bool | None = None
    compiled: bool | None = None
    data_parallel: bool | None = None
    ddp: bool | None = None


class AutocastInfo(_Record):
    used: bool | None = None
    dtype: str | None = None
    dtypes: list[str] | None = None
    device_type: str | None = None
    grad_scaler: bool | None = None
    grad_scaler_enabled: bool | None = None


class ZeroGradInfo(_Record):
    calls: int | None = None
    set_to_none: bool | None = None


class ForwardsInfo(_Record):
    root_calls: int | None = None
    grad_forwards: int | None = None  # root forwards under grad mode
    grad_without_backward: int | None = None
    hooks: str | None = None  # "per-root" or "global"
    locations: list[SourceLine] | None = None  # grad forwards without a backward


class ProfilerWindow(_Record):
    first_step: int | None = None
    steps: int | None = None


class ProfilerInfo(_Record):
    requested: bool | None = None
    started: bool | None = None
    user_profiler: bool | None = None
    user_profiler_kind: str | None = None
    emit_nvtx: bool | None = None
    window: ProfilerWindow | None = None
    trace_files: list[str] | None = None
    activities: list[str] | None = None
    error: str | None = None
    record_s: float | None = None
    export_s: float | None = None
    dropped_steps: int | None = None
    dropped_why: str | None = None


class DistInfo(_Record):
    initialized: bool | None = None
    backend: str | None = None
    world_size: int | None = None
    rank: int | None = None


class CompileInfo(_Record):
    used: bool | None = None
    recompiles: int | None = None
    graph_breaks: int | None = None
    frames_compiled: int | None = None
    unique_graphs: int | None = None


class InputsInfo(_Record):
    distinct_shapes_after_warmup: int | None = None
    distinct_shapes_per_root: list[int] | None = None


class CudaMemoryInfo(_Record):
    """torch.cuda.memory_stats() over the whole run, as the child read it at the end."""

    max_allocated_bytes: int | None = None
    max_reserved_bytes: int | None = None
    total_bytes: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    # The memory_stats() key names, in runs recorded before the short ones.
    num_alloc_retries: int | None = None
    num_ooms: int | None = None
    # memory_stats num_device_alloc / num_device_free (cudaMalloc / cudaFree calls) and
    # PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING = 1 in the child.
    device_allocs: int | None = None
    device_frees: int | None = None
    caching_disabled: bool | None = None


class MemoryHistoryInfo(_Record):
    requested: bool | None = None
    available: bool | None = None
    recorded: bool | None = None
    max_entries: int | None = None
    entries: int | None = None
    truncated: bool | None = None
    snapshot_reason: str | None = None  # "profiled window", "oom", "end of run"
    oom_events: int | None = None
    reason: str | None = None  # why it is unavailable


class PlanInfo(_Record):
    warmup_steps: int | None = None
    timed_steps: int | None = None
    profiler_warmup_steps: int | None = None  # absent in older runs
    profiled_steps: int | None = None
    total_steps: int | None = None


class ProcessInfo(_Record):
    """A training sub-process's identity (collect/process_tree.py)."""

    pid: int | None = None
    ppid: int | None = None
    host: str | None = None
    kind: str | None = None  # multiprocessing-spawn, torchrun, subprocess, ...
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None
    exit_code: int | None = None
    shared_model: bool | None = None  # the trained model's parameters are in shared memory


class HostSyncCalls(_Record):
    """Host syncs the child saw at the call (collect/sync_watch.py)."""

    calls: int | None = None
    steps_watched: int | None = None
    sites: list[SourceLine] | None = None


class StopPoint(_Record):
    """Where perfdoctor stopped the script once its plan was complete."""

    step: int | None = None  # steps closed when the plan ended
    location: SourceLine | None = None  # the user's line the stop came through
    framework: str | None = None  # "lightning", "transformers": whose loop it came through


class CommunicationInfo(_Record):
    """Collectives and DDP buckets the child timed (collect/comm_watch.py)."""

    timed: bool | None = None
    ddp_models: int | None = None
    untimed_ddp_hooks: int | None = None  # DDP comm hooks it could not wrap


class NvtxInfo(_Record):
    requested: bool | None = None
    available: bool | None = None
    reason: str | None = None  # why it is unavailable


class DeviceStepTiming(_Record):
    """CUDA events around each step (the device's own step time)."""

    used: bool | None = None
    failed: str | None = None  # why the events could not be read


class AppliedRow(_Record):
    id: str | None = None
    applied: bool | None = None
    verified: bool | None = None
    detail: str | None = None


class FlopCountInfo(_Record):
    """One step's FLOPs, counted by FlopCounterMode inside the last warm-up step."""

    method: str | None = None  # "torch.utils.flop_counter.FlopCounterMode"
    step: int | None = None  # the counted step's index
    flops_per_step: int | None = None
    by_op: dict[str, int] | None = None  # aten op -> FLOPs, the largest first
    counted_step_ms: float | None = None  # wall time of the counted step
    previous_step_ms: float | None = None  # the warm-up step before it (the counting cost)
    skipped: str | None = None  # why nothing was counted


class StepStacks(_Record):
    """The user's innermost line on the main thread, sampled every interval_ms of CPU per
    step (collect/stack_sampler.py); baseline runs with a profiler window only."""

    interval_ms: float | None = None
    samples: int | None = None  # ticks that read a stack, with a user frame or not
    dropped: int | None = None  # samples not kept: the row cap was reached
    not_sampled: str | None = None  # why the sampler did not run
    # [step, file, function, first line, line, samples, main-thread CPU ms they stand for]
    rows: list[list[Any]] | None = None


class Observations(_Record):
    """observations.json: what the child saw of the script. Every key is optional (None =
    absent = not observed); keys not listed here are kept in the raw file and ignored."""

    step_detection: str | None = None  # "optimizer", "backward" or "time": what a step is
    step_detection_note: str | None = None  # why a fallback signal was chosen
    closure_calls: int | None = None  # closure calls in optimizer.step(closure): each a step
    steps_seen: int | None = None  # steps with a row in steps.jsonl
    plan: PlanInfo | None = None  # the step plan the child ran
    plan_complete: bool | None = None  # every planned step ran
    stopped_by_perfdoctor: bool | None = None
    stopped_at: StopPoint | None = None
    exit_code: int | None = None  # the child's
    script_exit_code: int | None = None  # the script's own sys.exit(n)
    signal: str | None = None  # "SIGTERM": the signal that ended the script
    interrupted: bool | None = None  # Ctrl-C in the script
    seed: int | None = None  # None: --no-seed
    seeded: list[str] | None = None  # ["random", "torch", "numpy"]
    versions: dict[str, str | None] | None = None  # python, torch, cuda, perfdoctor
    torch: TorchSettings | None = None
    cpu: CpuInfo | None = None
    device: ObservedDevice | None = None
    dataloaders: list[DataLoaderInfo] | None = None
    optimizers: list[OptimizerInfo] | None = None
    roots: list[RootModuleInfo] | None = None  # the modules whose forward the script calls
    autocast: AutocastInfo | None = None
    zero_grad: ZeroGradInfo | None = None
    forwards: ForwardsInfo | None = None
    profiler: ProfilerInfo | None = None
    dist: DistInfo | None = None
    communication: CommunicationInfo | None = None
    flop_count: FlopCountInfo | None = None
    compile: CompileInfo | None = None
    inputs: InputsInfo | None = None
    cuda_memory: CudaMemoryInfo | None = None
    memory_history: MemoryHistoryInfo | None = None
    nvtx: NvtxInfo | None = None
    device_step_timing: DeviceStepTiming | None = None
    process: ProcessInfo | None = None  # a training sub-process's record only
    host_sync_calls: HostSyncCalls | None = None
    locations: dict[str, list[SourceLine]] | None = None  # by fact_catalog.LOCATION_TOPICS
    step_stacks: StepStacks | None = None  # where the main thread was, per step
    applied: list[AppliedRow] | None = None  # what each runtime applier did
    warnings: list[str] | None = None  # one line each, for the report
    error: str | None = None  # "Type: message"
    error_type: str | None = None
    error_location: SourceLine | None = None  # the innermost line of the user's code
    error_at_unix: float | None = None  # when a sub-process's error was seen
    cuda_oom: bool | None = None  # the error was torch.cuda.OutOfMemoryError
    launch_error: str | None = None  # "module not found: x", "syntax error: ..."
    nonfinite_losses: int | None = None  # steps whose loss was NaN/inf


# --------------------------------------------------------------------------- batch planning


class BatchProbe(_Record):
    """batch_probe.json: the peaks of one --plan-batch child run (collect/appliers/batch.py).
    The RSS peaks are the kernel's high-water mark (VmHWM), reset when the first step
    starts, so the setup (imports, loading the data) and the training are apart."""

    batch_size: int | None = None  # what the run asked for (None: the script's own)
    knob: str | None = None  # "argument" or "dataloader": how the batch was changed
    rss_setup_peak_bytes: int | None = None  # VmHWM before the first step
    rss_train_peak_bytes: int | None = None  # VmHWM from the first step to the end
    rss_reset: bool | None = None  # the high-water mark could be reset (else whole process)
    cuda_max_allocated_bytes: int | None = None  # from the first step (reset there)
    cuda_max_reserved_bytes: int | None = None
    cuda_total_bytes: int | None = None  # the device's memory
    mem_available_bytes: int | None = None  # MemAvailable when the first step started
    accumulate: int | None = None  # micro-batches per optimizer step (gradient accumulation)


class BatchPlanPoint(_Record):
    batch: int  # the batch size the run trained with
    run: str | None = None  # the child run directory, relative to the session
    samples_s: float | None = None  # samples per second at the median step
    peak_bytes: int | None = None  # the peak the fit uses (RSS train peak, or CUDA reserved)
    predicted_bytes: float | None = None  # the fit's prediction at this batch
    role: str | None = None  # "fit", "verify" or "extra"
    status: str | None = None  # the run's status ("completed", "script_crashed", ...)


class BatchPlanOption(_Record):
    id: str  # "amp-bf16", "activation-checkpointing", "grad-accumulation", ...
    batch: int  # the batch it was measured at
    peak_bytes: int | None = None
    saved_bytes: int | None = None  # against the same batch without it
    samples_s: float | None = None
    time_cost_frac: float | None = None  # samples/s lost (+) or gained (-) against without
    fits: bool | None = None  # its peak is within the limit
    note: str | None = None


class BatchPlan(_Record):
    """batch_plan.json (session directory): what --plan-batch measured and chose."""

    knob: str  # "argument", "dataloader" or "none"
    knob_detail: str  # how the batch is changed, or why it cannot be
    script_batch: int | None = None
    device: str | None = None  # "cpu" or "cuda"
    peak_kind: str | None = None  # what the peaks are: "rss" or "cuda_reserved"
    limit_bytes: int | None = None
    limit_source: str | None = None
    fixed_bytes: float | None = None
    per_sample_bytes: float | None = None
    fit_worst_residual_frac: float | None = None
    activations_per_sample_bytes: float | None = None  # from the baseline's memory snapshot
    limit_batch: int | None = None  # the largest batch predicted to fit
    verify_batch: int | None = None
    verify_why: str | None = None
    verify_error_frac: float | None = None  # (predicted - measured) / measured
    curve: list[BatchPlanPoint] | None = None
    best_batch: int | None = None
    confirmation: str | None = None  # the paired A/B verdict on samples/s
    confirmation_speedup: float | None = None
    confirmation_low: float | None = None
    recommended_batch: int | None = None  # best_batch when the A/B confirmed it, else the script's
    wanted_batch: int | None = None
    wanted_fits: bool | None = None
    options: list[BatchPlanOption] | None = None
    keep_effective_batch: bool | None = None
    accumulation_steps: int | None = None  # micro-batches per step that keep the effective
    recipe_note: str | None = None
    notes: list[str] | None = None
    # Why the plan ran: "--plan-batch", or the finding that made apply run it on its own.
    trigger: str | None = None
    budget_s: float | None = None  # an automatic plan's time budget (None: no budget)
    stopped: str | None = None  # the stage the budget stopped the plan before, and why
    # How far the memory prediction holds (optimize/batch_fit.py prediction_confidence):
    # "confirmed", "weak", "unreliable" or "unchecked", and why, in one sentence.
    prediction_confidence: str | None = None
    confidence_why: str | None = None
    # The check missed: the fit refitted with the check's run, and that refit checked once
    # more at a larger batch (batch_plan._recheck).
    refit_fixed_bytes: float | None = None
    refit_per_sample_bytes: float | None = None
    recheck_batch: int | None = None
    recheck_error_frac: float | None = None  # the refit's (predicted - measured) / measured


# --------------------------------------------------------------------------- progress.jsonl


class ProgressRow(_Record):
    """progress.jsonl: one line per step for the live display; `t` on the samples' clock."""

    step: int  # StepRecord.index
    phase: str
    t: float  # when the step ended, seconds on the samples' clock
    wall_ms: float | None = None
    note: str | None = None  # in-process A/B: pairs so far and each interval


# --------------------------------------------------------------------------- samples.jsonl


class _Sample(_Record, tag_field="kind"):
    t: int | float  # seconds since the parent spawned the child


class ClockSample(_Sample, tag="clock"):
    """The first row: the wall-clock time of t = 0."""

    unix_s: float


class NoteSample(_Sample, tag="note"):
    message: str


class CpuSample(_Sample, tag="cpu"):
    cpu_percent: list[int | float] | None = None  # per core, machine-wide
    rss_bytes: int | float | None = None  # the child process alone
    child_cpu_percent: int | float | None = None  # the child alone (100 = one core)
    workers: int | None = None  # its descendant processes (DataLoader workers, ranks)
    workers_rss_bytes: int | float | None = None
    workers_cpu_percent: int | float | None = None
    # Runs recorded before the ranks counted among `workers`.
    ranks: int | None = None
    ranks_rss_bytes: int | float | None = None
    ranks_cpu_percent: int | float | None = None
    # CPU percent of perfdoctor's own sampling process (collect/cpu_sampler.py): perfdoctor's,
    # so never counted in other processes' load.
    perfdoctor_cpu_percent: int | float | None = None


class GpuSample(_Sample, tag="gpu"):
    index: int  # the CUDA ordinal the child sees
    util_gpu: int | float | None = None  # percent
    util_mem: int | float | None = None
    mem_used_bytes: int | float | None = None
    mem_total_bytes: int | float | None = None
    sm_clock_mhz: int | float | None = None
    mem_clock_mhz: int | float | None = None
    power_w: int | float | None = None
    temp_c: int | float | None = None
    energy_mj: int | float | None = None  # since the driver loaded
    throttle_reasons: int | float | None = None  # clocks-event bitmask
    pcie_tx_kbs: int | float | None = None
    pcie_rx_kbs: int | float | None = None
    gpm_sm_active: int | float | None = None  # 0..1
    gpm_sm_occupancy: int | float | None = None
    gpm_tensor_active: int | float | None = None
    gpm_dram_bw: int | float | None = None


class GpuInfoSample(_Sample, tag="gpu_info"):
    index: int
    nvml_index: int | None = None  # null for a MIG device given by UUID
    name: str | None = None
    uuid: str | None = None
    power_limit_w: int | float | None = None
    sm_clock_max_mhz: int | float | None = None
    mem_clock_max_mhz: int | float | None = None
    mig: bool | None = None
    gpm: bool | None = None


SampleRow = Union[ClockSample, NoteSample, CpuSample, GpuSample, GpuInfoSample]  # noqa: UP007
SAMPLE_KINDS: dict[str, type[_Sample]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (ClockSample, NoteSample, CpuSample, GpuSample, GpuInfoSample)
}


# --------------------------------------------------------------------------- encode / decode


class SchemaMismatch(ValueError):
    """A value in a run-directory file does not have its schema's type."""


_ENCODER = msgspec.json.Encoder()


def encode_line(record: Any) -> bytes:
    """One JSON line (with its newline) of a schema struct or StepRecord."""
    return _ENCODER.encode(record) + b"\n"


def step_row(row: dict[str, Any]) -> StepRecord:
    """A step row as the child built it -> StepRecord, checked against the schema."""
    return convert(row, StepRecord)


def encode_lines(records: list[Any]) -> bytes:
    """JSON lines (each with its newline) of many schema structs or StepRecords, encoded in
    one call: the child writes its rows in batches."""
    return _ENCODER.encode_lines(records)


def step_rows(rows: list[dict[str, Any]]) -> list[StepRecord]:
    """Many step rows -> StepRecords in one conversion; SchemaMismatch names the first bad
    one (the caller then converts them one by one to keep the good ones)."""
    return convert(rows, list[StepRecord])


def sample_row(row: dict[str, Any]) -> SampleRow:
    """A sampler's row (with `kind` and `t`) -> its sample struct; every key must be a field
    of it, so a sampler that grows a field cannot lose it silently."""
    cls = SAMPLE_KINDS.get(str(row.get("kind")))
    if cls is None:
        raise SchemaMismatch(f"unknown sample kind {row.get('kind')!r}")
    unknown = set(row) - set(cls.__struct_fields__) - {"kind"}
    if unknown:
        raise SchemaMismatch(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    return convert({k: v for k, v in row.items() if k != "kind"}, cls)


def observations(data: Any) -> Observations:
    """observations.json's decoded JSON -> Observations (unknown keys ignored)."""
    return convert(data, Observations)


def progress_row(data: Any) -> ProgressRow:
    return convert(data, ProgressRow)


def known_sample(data: Any) -> SampleRow | None:
    """A samples.jsonl row -> its sample struct; None for a row of a kind this perfdoctor does
    not know (a newer one's), which the readers skip. SchemaMismatch when a row of a known
    kind has a wrong type."""
    if not isinstance(data, dict):
        raise SchemaMismatch("a sample row is not a JSON object")
    if str(data.get("kind")) not in SAMPLE_KINDS:
        return None
    return convert(data, SampleRow)  # type: ignore[no-any-return]


# Nesting a run directory's JSON may have: perfdoctor writes at most a few levels. Deeper
# values (a hostile file: 1,000 levels fit in 2 KB) would overflow the recursion of the
# decoders and of everything that walks the value afterwards.
MAX_JSON_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether decoded JSON `value` nests more than `limit` containers deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        if depth > limit:
            return True
        stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    return False


def decode_json_line(line: bytes) -> Any:
    """One JSONL line, untyped. Python's own NaN/Infinity literals (runs written with
    json.dumps before the rows went through these schemas) are read too; msgspec.DecodeError
    for a torn line, and for one nested deeper than MAX_JSON_DEPTH."""
    try:
        data = msgspec.json.decode(line)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply") from None
    except msgspec.DecodeError:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise msgspec.DecodeError(f"not JSON: {line[:80]!r}") from None
    if too_deep(data):
        raise msgspec.DecodeError("JSON nested too deeply")
    return data


def decode_step_line(line: bytes) -> StepRecord:
    """One steps.jsonl line. msgspec.DecodeError for a torn line (or one nested too deeply);
    SchemaMismatch for a line that is JSON but not a step."""
    try:
        return msgspec.json.decode(line, type=StepRecord)
    except msgspec.ValidationError as err:
        raise SchemaMismatch(str(err)) from err
    except (msgspec.DecodeError, RecursionError):
        return convert(decode_json_line(line), StepRecord)


def convert(data: Any, kind: Any) -> Any:
    """Decoded JSON -> `kind` (a schema struct or a model dataclass); SchemaMismatch when a
    value does not have its field's type or a required field is missing."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as err:
        raise SchemaMismatch(str(err)) from err


# --------------------------------------------------------------------------- compile.json
# What torch.compile did in the child (collect/compile_watch.py): dynamo's structured-trace
# events (the ones TORCH_TRACE / tlparse read), kept small, each with the step it came in.


class CompiledFrame(_Record):
    """One dynamo compilation of a frame (structured trace `compilation_metrics`)."""

    compile_id: str | None = None  # "frame/attempt", e.g. "1/0"; attempt > 0: a recompile
    step: int | None = None  # optimizer steps closed when it was compiled
    co_name: str | None = None  # the function; torch_dynamo_resume_in_*: after a graph break
    co_filename: str | None = None
    co_firstlineno: int | None = None
    compile_s: float | None = None  # entire_frame_compile_time_s (dynamo + backend)
    backend_s: float | None = None  # backend_compile_time_s (AOT + inductor)
    backward_compile_s: float | None = None  # the backward graph's inductor time
    graph_ops: int | None = None  # graph_op_count: 0 means no graph (eager only)
    fail_type: str | None = None
    fail_reason: str | None = None
    restart_reasons: list[str] | None = None


class GraphBreakEvent(_Record):
    """A `dynamo_graph_break_reason` artifact: logged each time a frame with a break compiles."""

    compile_id: str | None = None
    step: int | None = None
    text: str | None = None  # "Graph break in user code at FILE:LINE\nGraph Break Reason: ..."
    code: str | None = None  # the user's line at FILE:LINE, as written


class RecompileEvent(_Record):
    """A `recompile_reasons` artifact: the guards that failed, before compile `compile_id`."""

    compile_id: str | None = None
    step: int | None = None
    text: str | None = None


class CompileLogLine(_Record):
    """A warning dynamo or inductor logged: cudagraph skips and re-recordings, the recompile
    limit."""

    kind: str | None = None  # "cudagraph_skip", "cudagraph_rerecord", "recompile_limit"
    step: int | None = None
    message: str | None = None


class CompileLog(_Record):
    """compile.json: written when the script compiled anything (absent otherwise)."""

    torch: str | None = None
    frames: list[CompiledFrame] | None = None
    graph_breaks: list[GraphBreakEvent] | None = None
    recompiles: list[RecompileEvent] | None = None
    log_lines: list[CompileLogLine] | None = None
    # torch._dynamo.utils.counters at the end: {"graph_break": {reason: n}, "stats":
    # {"unique_graphs": n, ...}, "inductor": {"cudagraph_skips": n, ...}}
    counters: dict[str, dict[str, int]] | None = None
    dropped: int | None = None  # events not kept (the cap on each list)
    # torch._dynamo.config.recompile_limit (cache_size_limit before) at the end of the run:
    # the recompiles per frame after which dynamo runs it eagerly, as the script set it.
    recompile_limit: int | None = None


def compile_log(data: Any) -> CompileLog:
    return convert(data, CompileLog)
