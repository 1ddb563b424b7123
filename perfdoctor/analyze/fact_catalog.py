"""Every fact name, its unit, where it comes from and what it means.

Facts are flat scalars with the unit in the name (`_ms`, `_frac`, `_bytes`, `_count`,
`_per_step`). None means "not measured" (e.g. GPU facts on a CPU run). Rules name the facts
they need; a test checks that every name a rule needs and every name the analysis produces is
documented here, so this table is the single reference (`perfdoctor rules` shows it).

Sources: steps (steps.jsonl), obs (observations.json, what the child saw of the script's
settings), trace (profiler trace), memory (CUDA memory snapshot), samples (NVML / psutil),
manifest.

To add a fact: add one line here (`_gpu` for a fact only a CUDA run produces), produce it in
analyze/facts.py, test it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The skip reason of a rule that needs what only a perfdoctor run records, when the input was
# a trace recorded elsewhere (`perfdoctor diagnose`); the renderers count skips by it.
TRACE_ONLY_REASON = (
    "skipped because this was diagnosed from a trace without a perfdoctor run "
    "(only `perfdoctor profile` records it)"
)


@dataclass(frozen=True)
class FactDoc:
    unit: str
    source: str
    description: str
    # Only a CUDA run can produce it: on a CPU run its absence is expected, and a rule that
    # needs it is skipped with "not measured on a CPU run", not as if something went wrong.
    gpu_only: bool = False


def _f(unit: str, source: str, description: str) -> FactDoc:
    return FactDoc(unit, source, description)


def _gpu(unit: str, source: str, description: str) -> FactDoc:
    return FactDoc(unit, source, description, gpu_only=True)


FACTS: dict[str, FactDoc] = {
    # ---- device / run ---------------------------------------------------------------
    "device_is_cuda": _f("bool", "manifest", "the script trained on a CUDA device"),
    "device_count": _f("count", "manifest", "devices visible to the child"),
    "gpu_compute_capability": _gpu("major.minor", "manifest", "e.g. 8.0 Ampere, 9.0 Hopper"),
    "device_total_memory_bytes": _gpu("bytes", "manifest", "memory of the training device"),
    "cpu_cores_logical": _f("count", "obs", "logical CPU cores available to the child"),
    "cpu_cores_physical": _f("count", "obs", "physical CPU cores"),
    "cpu_native_bf16": _f("bool", "obs", "the CPU has AVX512-BF16 or AMX-BF16 instructions"),
    "cpu_native_fp16": _f("bool", "obs", "the CPU has AVX512-FP16 or AMX-FP16 instructions"),
    "steps_timed": _f("count", "steps", "steps in the timed window"),
    # ---- the whole loop (analyze/loop_account.py) ------------------------------------
    "loop_long_step_frac": _f(
        "fraction",
        "steps",
        "excess over a timed step of the long loop-work steps (evaluation, no_grad forwards, "
        "torch.save in them), over the wall time of every step of the run",
    ),
    "loop_timed_step_frac": _f(
        "fraction", "steps", "a timed step (median) over the loop's wall time per step"
    ),
    "loop_long_steps": _f("count", "steps", "long loop-work steps (3x a timed step or more)"),
    "loop_long_step_frac_fast_pace": _f(
        "fraction",
        "steps",
        "the long steps' share of the loop with the other steps at the pace of the fastest "
        "quarter of the timed steps, or of the stepping thread's CPU time, whichever is "
        "larger; None on a quiet machine",
    ),
    "loop_long_step_code": _f(
        "name",
        "observations.json step_stacks",
        "the user's function and lines the main thread was in during the long steps, with "
        "its share of the samples",
    ),
    "jitter_excess_data_frac": _f(
        "fraction",
        "steps",
        "share of the timed steps' time above their median that is extra DataLoader wait",
    ),
    "jitter_excess_other_frac": _f(
        "fraction",
        "steps",
        "share of the timed steps' time above their median that no named cost or data wait "
        "explains (the script's own code)",
    ),
    "jitter_excess_cause": _f(
        "name",
        "steps",
        "the named cost that holds most of the timed steps' time above their median: compile, "
        "eval_forward, nograd_forward or save",
    ),
    "jitter_excess_cause_frac": _f(
        "fraction", "steps", "jitter_excess_cause's share of the time above the median"
    ),
    "jitter_longest_step_index": _f("count", "steps", "the longest timed step's index"),
    "jitter_longest_step_ms": _f("ms", "steps", "the longest timed step's wall time"),
    "phase_stall_ratio": _f(
        "ratio",
        "steps",
        "the largest median / fastest instance of a phase (forward, backward, optimizer) "
        "over the timed steps, phases with a median of 1 ms or more",
    ),
    "phase_stall_phase": _f("name", "steps", "the phase of phase_stall_ratio"),
    "phase_stall_median_ms": _f("ms", "steps", "that phase's median over the timed steps"),
    "phase_stall_fastest_ms": _f("ms", "steps", "that phase's fastest timed instance"),
    "loop_load_stretch": _f(
        "ratio",
        "steps",
        "median timed step's wall time (less data wait) over its CPU time, when 2x or more "
        "(a loaded machine); None otherwise and on CUDA runs",
    ),
    "loop_long_step_periodic_under_load": _f(
        "bool", "steps", "long steps came back at a fixed period while the machine was loaded"
    ),
    "loop_startup_compile_ms": _f(
        "ms", "compile.json", "torch.compile time in the first step's one-off start-up"
    ),
    "loop_period_steps": _f("count", "steps", "steps between long loop-work steps (2+ seen)"),
    "loop_long_step_recurs": _f(
        "bool", "steps", "the long loop work came back within the run (not only step 0)"
    ),
    "loop_long_step_cost": _f(
        "name",
        "steps",
        "what most of the long steps' excess went to: compile, eval_forward, nograd_forward, "
        "save or other",
    ),
    "step_detection": _f(
        "name", "manifest", "optimizer, backward or time; profiler_step for a trace alone"
    ),
    "step_timing_source": _f(
        "name",
        "trace",
        "profiled_steps when step timing comes from a trace's ProfilerStep spans "
        "(perfdoctor diagnose; they carry profiler overhead), else None",
    ),
    "gpu_name": _f("name", "trace", "the training GPU's name from the trace's deviceProperties"),
    "gpu_vendor": _f("name", "trace", "nvidia or amd, from the trace's deviceProperties"),
    "dataloader_multiprocess": _f(
        "bool",
        "trace",
        "the trace's DataLoader iterator is _MultiProcessingDataLoaderIter (workers > 0); "
        "False for _SingleProcessDataLoaderIter (num_workers=0)",
    ),
    # ---- step timing (host side) -------------------------------------------------------
    "step_ms_p50": _f("ms", "steps", "median wall time of a timed step"),
    "step_ms_p90": _f("ms", "steps", "90th percentile wall time of a timed step"),
    "step_ms_mean": _f("ms", "steps", "mean wall time of a timed step"),
    "step_jitter_ratio": _f("ratio", "steps", "p90 / p50 of timed step time"),
    "data_wait_ms_p50": _f("ms", "steps", "median time per step inside DataLoader __next__"),
    "data_wait_frac": _f(
        "frac", "steps", "median data wait per step / median step (one slow step is no trend)"
    ),
    "forward_frac": _f("frac", "steps", "median root-module forward / median step (host)"),
    "backward_frac": _f("frac", "steps", "median backward / median step (host)"),
    "optimizer_frac": _f("frac", "steps", "median optimizer.step / median step (host)"),
    "other_frac": _f("frac", "steps", "share of step time outside data/fwd/bwd/optimizer"),
    "micro_batches_per_step": _f("count", "steps", "backward calls per optimizer step"),
    "batch_size": _f("samples", "obs", "samples per micro-batch: what the root model received"),
    "throughput_samples_s": _f(
        "samples/s", "steps", "median samples per step / median timed step time"
    ),
    "rss_growth_bytes_per_step": _f(
        "bytes", "steps", "RSS slope over timed steps; 0 unless it rises in each third"
    ),
    "rss_bytes_max": _f("bytes", "steps", "largest process RSS over timed steps"),
    "memory_growth_fit_sampled": _f(
        "bool",
        "steps",
        "the memory growth slopes are medians of a seeded sample of 100,000 step pairs "
        "(a long run: all pairs would grow with the square of the steps)",
    ),
    "rss_growth_over_noise": _f(
        "ratio", "steps", "rise of the RSS slope over the timed steps / RSS scatter"
    ),
    "cuda_allocated_growth_bytes_per_step": _gpu(
        "bytes", "steps", "slope of CUDA allocated memory over timed steps"
    ),
    "cuda_allocated_growth_over_noise": _f(
        "ratio", "steps", "rise of the CUDA allocated slope / its scatter (large: steady)"
    ),
    "loss_is_finite": _f("bool", "steps", "every captured loss was finite"),
    # ---- settings the child observed ------------------------------------------------------
    "dataloader_count": _f("count", "obs", "DataLoaders the script created"),
    "dataloader_num_workers": _f("count", "obs", "num_workers of the training DataLoader"),
    "dataloader_pin_memory": _f("bool", "obs", "pin_memory of the training DataLoader"),
    "dataloader_prefetch_factor": _f("count", "obs", "prefetch_factor (None with 0 workers)"),
    "dataloader_persistent_workers": _f("bool", "obs", "persistent_workers"),
    "dataloader_is_iterable": _f("bool", "obs", "the dataset is an IterableDataset"),
    "dataloader_dataset_class": _f("name", "obs", "the training DataLoader's dataset class"),
    "dataloader_sampler_class": _f("name", "obs", "the training DataLoader's sampler class"),
    "dataloader_batch_size": _f(
        "count", "obs", "the training DataLoader's batch_size (None: it does not batch rows)"
    ),
    "torch_num_threads": _f("count", "obs", "torch.get_num_threads() during training"),
    "anomaly_detection_enabled": _f("bool", "obs", "torch.autograd anomaly mode was on"),
    "user_profiler_active": _f("bool", "obs", "the script runs its own torch.profiler"),
    "emit_nvtx_enabled": _f("bool", "obs", "autograd.profiler.emit_nvtx was on"),
    "grad_forwards_without_backward": _f(
        "count", "obs", "root forwards that built an autograd graph never used by backward"
    ),
    "grad_forwards_without_backward_frac": _f(
        "frac", "obs", "share of root forwards that built a graph with no backward"
    ),
    "cudnn_benchmark": _f("bool", "obs", "torch.backends.cudnn.benchmark"),
    "cudnn_deterministic": _f("bool", "obs", "torch.backends.cudnn.deterministic"),
    "deterministic_algorithms": _f("bool", "obs", "torch.use_deterministic_algorithms"),
    "tf32_matmul_enabled": _f("bool", "obs", "fp32 matmuls may use TF32"),
    "autocast_used": _f("bool", "obs", "the script runs under torch.autocast"),
    "autocast_dtype": _f("name", "obs", "float16 or bfloat16"),
    "autocast_device_type": _f("name", "obs", "device_type of the script's autocast (cpu, cuda)"),
    "optimizer_param_tensors": _f("count", "obs", "parameter tensors the (first) optimizer steps"),
    "grad_scaler_used": _f("bool", "obs", "the script built a GradScaler"),
    "optimizer_class": _f("name", "obs", "class of the (first) optimizer"),
    "optimizer_count": _f("count", "obs", "optimizers that stepped"),
    "optimizer_impl": _f("name", "obs", "fused, foreach or single-tensor"),
    "zero_grad_set_to_none": _f("bool", "obs", "zero_grad was called with set_to_none=True"),
    "model_param_count": _f("count", "obs", "trainable parameters of the root models"),
    "model_conv_count": _f("count", "obs", "Conv2d/Conv3d modules in the root models"),
    "model_channels_last": _f("bool", "obs", "4-D parameters are channels_last"),
    "model_compiled": _f("bool", "obs", "the root model is torch.compile'd"),
    "conv_bias_before_bn_count": _f("count", "obs", "Conv with bias directly followed by BN"),
    "uses_data_parallel": _f("bool", "obs", "nn.DataParallel wraps the model"),
    "uses_ddp": _f("bool", "obs", "DistributedDataParallel wraps the model"),
    "dist_backend": _f("name", "obs", "torch.distributed backend (nccl, gloo)"),
    "world_size": _f("count", "obs", "torch.distributed world size"),
    # ---- multi-rank runs (--nproc-per-node N > 1; None with one rank) ----------------------
    # A rank's "own" work per step is its step less its time with a collective in flight
    # (analyze/straggler.py): the other ranks wait for the one with the most of it, so that
    # one is the straggler, in these facts and in the ranks table alike. Runs recorded
    # before steps.jsonl comm_ms: the step's wall time outside forward and backward.
    "ranks_launched": _f("count", "manifest", "processes perfdoctor started per run (1 or N)"),
    "rank_step_ms_p50_spread_frac": _f(
        "frac", "steps", "(slowest - fastest) / fastest median timed step over the ranks"
    ),
    "straggler_rank": _f("index", "steps", "the rank with the most own work per step"),
    "straggler_node_rank": _f("index", "obs", "the straggler's node, when ranks span nodes"),
    "fastest_rank": _f("index", "steps", "the rank with the least own work per step"),
    "straggler_own_basis": _f(
        "name",
        "steps",
        "step_less_comm (own work = the step less its collective time) or, for runs without "
        "comm_ms, outside_forward_backward",
    ),
    "straggler_own_ms_p50": _f("ms", "steps", "median own work per step, straggler"),
    "fastest_rank_own_ms_p50": _f("ms", "steps", "the same on the fastest rank"),
    "straggler_code_ms_p50": _f(
        "ms", "steps", "median host time outside data, forward and backward, straggler"
    ),
    "fastest_rank_code_ms_p50": _f("ms", "steps", "the same on the fastest rank"),
    "straggler_excess_ms": _f(
        "ms", "steps", "straggler's own work per step minus the other ranks' median"
    ),
    "straggler_excess_frac": _f(
        "frac", "steps", "straggler_excess_ms / the ranks' median step: what every rank waits"
    ),
    "rank_timed_steps_min": _f(
        "count", "steps", "the fewest timed steps any rank recorded (a crash can leave one)"
    ),
    "job_late_rank": _f(
        "rank",
        "trace",
        "of several ranks' traces, the rank the others wait for: the shortest collective "
        "kernels, collective by collective (analyze/job_ranks.py)",
    ),
    "job_late_rank_last_arrivals": _f("count", "trace", "collectives job_late_rank came last to"),
    "job_collectives_matched": _f("count", "trace", "collectives matched across the traces"),
    "job_held_ms_per_step": _f(
        "ms", "trace", "the median other rank's wait for later ranks less job_late_rank's"
    ),
    "ranks_traced": _f("count", "trace", "ranks whose traces were given"),
    "ranks_untraced": _f("count", "trace", "world size less ranks_traced"),
    "comm_peer_wait_ms_p50": _f(
        "ms",
        "steps",
        "rank 0's median wait per step for the slowest rank in the collectives: its recorded "
        "collective time less the least of any rank's (comm_ms), else the largest own time "
        "over the ranks less rank 0's own",
    ),
    "comm_peer_wait_frac": _f(
        "frac", "steps", "comm_peer_wait_ms_p50 (at most the collective time) / the step"
    ),
    "comm_transfer_frac": _f(
        "frac",
        "trace",
        "rank 0's collective time less its wait for a slower peer, / the step (under DDP at "
        "most the smallest timed backward over the ranks)",
    ),
    "straggler_data_wait_ms_p50": _f("ms", "steps", "median data wait per step, straggler"),
    "fastest_rank_data_wait_ms_p50": _f("ms", "steps", "median data wait per step, fastest"),
    "straggler_forward_ms_p50": _f("ms", "steps", "median forward (host) per step, straggler"),
    "fastest_rank_forward_ms_p50": _f("ms", "steps", "median forward (host) per step, fastest"),
    "straggler_backward_ms_p50": _f("ms", "steps", "median backward (host) per step, straggler"),
    "fastest_rank_backward_ms_p50": _f(
        "ms", "steps", "median backward (host) per step, fastest (holds its all-reduce wait)"
    ),
    # Host time with a torch.distributed collective in flight (steps.jsonl comm_ms; DDP's
    # gradient all-reduce included): on gloo the transfer and the wait for the peers.
    "comm_step_frac": _f(
        "frac", "steps", "median share of the lead process's step in torch.distributed collectives"
    ),
    "rank_comm_frac_max": _f("frac", "steps", "the largest such share over the training processes"),
    "rank_comm_frac_max_rank": _f("index", "steps", "the rank (record k) with the largest share"),
    "rank_comm_frac_min": _f("frac", "steps", "the smallest such share over the processes"),
    "recompile_count": _f("count", "obs", "torch.compile recompilations seen"),
    # ---- compile.json + the trace's compiled regions (analyze/compile_facts.py) ----------
    "compile_frames": _f("count", "compile", "frame compilations dynamo logged (recompiles too)"),
    "compile_graph_break_sites": _f("count", "compile", "distinct graph-break sites"),
    "compile_break_eager_ms_per_step": _f(
        "ms", "trace", "eager time per profiled step between compiled graphs, charged to breaks"
    ),
    "compile_break_step_frac": _f("frac", "trace", "that time over the median timed step"),
    "compile_recompiles": _f("count", "compile", "recompilations (compile attempt > 0)"),
    "compile_recompile_ms_per_step": _f(
        "ms",
        "compile",
        "recompile seconds inside the timed steps, per timed step (mode switches left out)",
    ),
    "compile_recompile_step_frac": _f("frac", "compile", "that time over the median timed step"),
    "compile_time_s": _f("s", "compile", "all compile time of the run (dynamo + backend)"),
    "compile_top_issue": _f("text", "compile", "the costliest break or recompile: file:line"),
    "compile_top_issue_ms_per_step": _f("ms", "compile", "its cost per step"),
    "compile_top_break": _f("text", "compile", "the costliest graph break: file:line (cause)"),
    "compile_disable_break_sites": _f(
        "count", "compile", "graph-break sites at a torch.compiler.disable'd function"
    ),
    "compile_top_recompile": _f("text", "compile", "the costliest recompile: file:line (cause)"),
    "cudagraph_skip_count": _f("count", "compile", "CUDA-graph skips (reduce-overhead)"),
    "compile_recompile_limit": _f(
        "count", "compile", "dynamo's recompile limit per frame, as the script set it"
    ),
    "compile_recompile_limit_hit": _f(
        "bool", "compile", "dynamo warned that a frame reached the recompile limit"
    ),
    "input_shape_changes": _f(
        "count", "obs", "most distinct training input shapes of one root after warm-up"
    ),
    # ---- trace: CPU side -----------------------------------------------------------------
    "trace_steps": _f("count", "trace", "ProfilerStep spans in the trace"),
    "trace_step_ms_p50": _f("ms", "trace", "median ProfilerStep span"),
    "host_syncs_per_step": _f("count", "trace", "item/_local_scalar_dense/synchronize per step"),
    "host_sync_ms_per_step": _f("ms", "trace", "time blocked in host syncs per step"),
    "cpu_op_count_per_step": _f("count", "trace", "aten ops per step"),
    "single_tensor_optimizer": _f("bool", "trace", "_single_tensor_* optimizer ops seen"),
    "zero_grad_zeroing": _f("bool", "trace", "aten::zero_ under zero_grad (not set_to_none)"),
    "tensor_to_device_per_step": _f(
        "count", "trace", "tensors created on CPU then copied to the device each step"
    ),
    "conv_ms_frac": _f("frac", "trace", "share of op time in convolutions"),
    "matmul_ms_frac": _f("frac", "trace", "share of op time in matmul/linear/bmm"),
    "fp32_matmul_conv_frac": _f("frac", "trace", "share of op time in fp32 matmul/conv"),
    "misaligned_lowp_gemm_count": _f(
        "count", "trace", "fp16/bf16 GEMMs with a dim not a multiple of 8"
    ),
    "trace_python_frames": _f(
        "count", "trace", "Python frames (python_function events) the trace recorded"
    ),
    "misaligned_gemm_dims": _f("name", "trace", "those GEMMs' dims that are not multiples of 8"),
    "embedding_rows": _f(
        "count", "trace", "rows of the largest embedding table looked up (a vocabulary)"
    ),
    "dataloader_trace_ms_per_step": _f("ms", "trace", "enumerate(DataLoader) time per step"),
    "comm_frac": _f(
        "frac",
        "trace",
        "share of the profiled steps' time the host spends in nccl/gloo collectives (union)",
    ),
    # ---- trace: GPU side -----------------------------------------------------------------
    "gpu_busy_frac": _gpu(
        "frac", "trace", "union of GPU ops / the GPU window (first to last op of the steps)"
    ),
    "gpu_idle_host_wait_frac": _gpu(
        "frac", "trace", "GPU window idle with nothing queued: the host did not keep up"
    ),
    "gpu_idle_host_data_frac": _gpu(
        "frac", "trace", "host wait while the launching thread was in the DataLoader"
    ),
    "gpu_idle_host_sync_frac": _gpu(
        "frac",
        "trace",
        "host wait a sync that drained the GPU's queue explains: the time the host sat blocked "
        "in it plus issuing the next op",
    ),
    "gpu_idle_host_busy_frac": _gpu(
        "frac", "trace", "host wait with the host busy elsewhere (Python, dispatch, launches)"
    ),
    "gpu_idle_host_unrecorded_frac": _gpu(
        "frac",
        "trace",
        "host wait with nothing recorded on the host, so no cause in the trace: after the last "
        "GPU op once the launching thread recorded nothing more (the trace's tail), and before "
        "an op, stretches of 100 µs or more with no CPU op, runtime call, Python frame or "
        "user annotation on any host thread",
    ),
    "gpu_idle_launch_gap_frac": _gpu(
        "frac", "trace", "GPU window idle in short gaps before queued ops (dispatch latency)"
    ),
    "gpu_idle_dependency_wait_frac": _gpu(
        "frac", "trace", "GPU window idle with work queued but waiting (events, streams, peers)"
    ),
    "gpu_compute_frac": _gpu("frac", "trace", "GPU window with a non-communication kernel"),
    "gpu_comm_frac": _gpu("frac", "trace", "GPU window with a communication kernel"),
    "gpu_comm_exposed_frac": _gpu(
        "frac", "trace", "GPU window with communication and no compute kernel beside it"
    ),
    "gpu_comm_overlap_frac": _gpu(
        "frac", "trace", "share of communication time overlapped by compute kernels"
    ),
    "gpu_tail_ms": _gpu("ms", "trace", "GPU work running after the host's last profiled step"),
    "gpu_window_ms": _gpu("ms", "trace", "length of the GPU window the *_frac GPU facts divide by"),
    "gpu_window_launch_count": _gpu(
        "count", "trace", "kernels and memcpys on the device in the GPU window: launches"
    ),
    "launch_call_us_mean": _gpu(
        "us",
        "trace",
        "mean cudaLaunchKernel / cuLaunchKernel (hip*LaunchKernel) call, calls over 50 µs left "
        "out (HTA's runtime outliers: lazy loading, a full queue): the host's cost of a launch",
    ),
    "launch_ops_host_frac": _gpu(
        "frac",
        "trace",
        "GPU window the host spends in the ops that launch GPU work (the outermost CPU op around "
        "each launch, copy or memset call, union over threads): what CUDA graphs remove at most",
    ),
    "kernels_per_step": _gpu("count", "trace", "GPU kernels launched per step"),
    "kernel_us_p50": _gpu("us", "trace", "median kernel duration"),
    "kernel_launches_per_step": _f(
        "count", "trace", "kernel launch calls per step (cudaLaunch* and cuLaunch* for Triton)"
    ),
    "memcpy_htod_ms_per_step": _gpu("ms", "trace", "host-to-device copy time per step"),
    "memcpy_dtoh_ms_per_step": _gpu("ms", "trace", "device-to-host copy time per step"),
    "memcpy_dtod_ms_per_step": _f("ms", "trace", "device-to-device copy time per step"),
    "pageable_htod_count_per_step": _gpu("count", "trace", "HtoD copies from pageable memory"),
    "pageable_htod_frac": _gpu("frac", "trace", "share of HtoD bytes from pageable memory"),
    "tensor_core_kernel_frac": _gpu("frac", "trace", "share of kernel time in tensor-core kernels"),
    "triton_kernel_count_per_step": _gpu("count", "trace", "Triton kernels per step"),
    "comm_kernel_frac": _gpu(
        "frac",
        "trace",
        "share of kernel time in communication kernels (NCCL/RCCL, DeepEP, symmetric memory)",
    ),
    # ---- trace: collectives (analyze/comm_trace.py, comm_wait.py) ------------------------
    "comm_families": _gpu("name", "trace", "communication libraries seen: nccl, deepep, ..."),
    "comm_collective_mix": _gpu("name", "trace", "collective types by share of comm time"),
    "comm_dominant_collective": _gpu("name", "trace", "the collective with the most time"),
    "comm_parallelism": _gpu(
        "name",
        "trace",
        "what the mix points at: data_parallel, fsdp, expert_parallel, all_to_all, pipeline, "
        "tensor_parallel",
    ),
    "comm_group_size": _gpu("count", "trace", "the largest process group a collective used"),
    "comm_link_name": _gpu("name", "trace", "the per-GPU link assumed from the device name"),
    "comm_link_gbs": _gpu("GB/s", "trace", "that link's bandwidth per direction"),
    "comm_busbw_gbs_p50": _gpu(
        "GB/s", "trace", "median nccl-tests bus bandwidth of the dominant collective (>= 1 MiB)"
    ),
    "comm_busbw_link_frac": _gpu("frac", "trace", "comm_busbw_gbs_p50 / comm_link_gbs"),
    "comm_size_r": _gpu("ratio", "trace", "Pearson r of duration against message size"),
    "comm_wait_verdict": _gpu(
        "name", "trace", "dominant collective: transfer, waiting (for a peer) or unknown"
    ),
    "comm_wait_reason": _gpu("name", "trace", "why comm_wait_verdict says so"),
    "comm_dtype": _gpu(
        "name", "trace", "the dtype the most communication time moved (Float, BFloat16, ...)"
    ),
    "comm_transfer_share": _gpu(
        "frac", "trace", "of the communication kernels' time, the transfer (not the wait)"
    ),
    "gpu_comm_exposed_transfer_frac": _gpu(
        "frac", "trace", "gpu_comm_exposed_frac x comm_transfer_share: what overlap can hide"
    ),
    # ---- precision and FLOPs (compute_facts.py) --------------------------------------
    "matmul_kernel_frac": _gpu(
        "frac", "trace", "share of kernel time in GEMM/conv/attention kernels"
    ),
    "lowp_matmul_kernel_frac": _gpu(
        "frac", "trace", "of GEMM/conv/attention kernel time: fp4/MX/fp8/int8/bf16/fp16"
    ),
    "fp32_matmul_kernel_frac": _gpu(
        "frac", "trace", "share of kernel time in fp32 SIMT or TF32 GEMM/conv/attention kernels"
    ),
    "unknown_precision_matmul_frac": _gpu(
        "frac", "trace", "of GEMM/conv/attention kernel time: precision not known"
    ),
    "compute_precision": _gpu(
        "name", "trace", "the class with most GEMM/conv/attention time ('bf16 on matrix cores')"
    ),
    "flops_per_step": _f("count", "trace", "FLOPs of one step (FlopCounterMode or shapes)"),
    "flops_source": _f("name", "trace", "where flops_per_step came from, or why it is absent"),
    "achieved_tflops": _f("TFLOP/s", "trace", "FLOPs per second of step wall time"),
    "mfu_frac": _f("frac", "trace", "achieved FLOP/s / the device's dense peak (per precision)"),
    "mfu_peak_tflops": _f("TFLOP/s", "trace", "the MFU denominator (FLOP-weighted)"),
    "mfu_peak": _f("name", "trace", "the denominator in words: 'N TFLOP/s dense bf16, H100 SXM'"),
    "mfu_missing": _f("name", "trace", "why there is no MFU (unknown device, no peak)"),
    "flop_count_cost_ms": _f(
        "ms", "obs", "the counted warm-up step's wall time minus the warm-up step before it"
    ),
    # ---- memory (CUDA snapshot / manifest) ---------------------------------------------
    "peak_allocated_bytes": _gpu("bytes", "memory", "peak allocated device memory"),
    "peak_reserved_bytes": _gpu("bytes", "memory", "peak reserved device memory"),
    "peak_allocated_frac": _gpu("frac", "memory", "peak allocated / device total"),
    "fragmentation_frac": _gpu("frac", "memory", "(reserved - allocated) / reserved at peak"),
    "alloc_retries": _gpu("count", "memory", "allocator cudaMalloc retries"),
    "oom_events": _gpu("count", "memory", "out-of-memory events"),
    "activation_bytes_frac": _gpu("frac", "memory", "share of the peak that is activations"),
    "optimizer_state_bytes_frac": _f(
        "frac", "memory", "share of the peak allocated under the optimizer (torch/optim frames)"
    ),
    "largest_free_block_frac": _f(
        "frac", "memory", "largest free block / free bytes in the snapshot's segments"
    ),
    "expandable_segments": _f(
        "bool", "memory", "the allocator ran with expandable_segments (allocator_settings)"
    ),
    "memory_history_truncated": _f(
        "bool", "memory", "the allocator history hit max_entries (older events dropped)"
    ),
    # ---- samples (NVML / psutil) ---------------------------------------------------------
    "gpu_util_mean_frac": _gpu("frac", "samples", "NVML utilization.gpu mean over timed steps"),
    "gpu_power_w_mean": _gpu("W", "samples", "mean board power"),
    "energy_j_per_step": _gpu("J", "samples", "NVML energy counter delta per step"),
    "gpu_throttled_frac": _gpu("frac", "samples", "share of samples with power/thermal throttle"),
    "sm_active_frac": _gpu("frac", "samples", "GPM SM activity (Hopper)"),
    "tensor_active_frac": _gpu("frac", "samples", "GPM tensor-core activity (Hopper)"),
    "cpu_util_mean_frac": _f("frac", "samples", "mean CPU utilization over the cores"),
    "cpu_busy_cores": _f("count", "samples", "cores busy on average (sum of per-core util)"),
    "cpu_other_busy_cores": _f(
        "count", "samples", "cores busy outside the run (machine minus child and its workers)"
    ),
    "child_cpu_busy_cores": _f(
        "count",
        "samples",
        "cores the run's processes kept busy on average: the process tree perfdoctor "
        "started (the training process or a launcher, its workers, every rank), CPU %/100",
    ),
    # ---- trace: allocator, capture, workload kind, GPU-side step (timeline_facts.py) ----
    "alloc_call_count": _gpu(
        "count",
        "trace",
        "device malloc/free runtime calls in the profiled steps (cudaMalloc, cudaFree, "
        "hipMalloc, hipFree, *Async, cuMem*/hipMem* for expandable segments; whole trace "
        "without steps)",
    ),
    "alloc_syncing_free_count": _gpu(
        "count", "trace", "of them, frees that synchronize the device (cudaFree, hipFree)"
    ),
    "alloc_call_frac": _gpu(
        "frac", "trace", "host time in those calls (their union) / the steps' span"
    ),
    "alloc_calls_per_step": _gpu("count", "trace", "device malloc/free calls per step"),
    "alloc_call_ms_per_step": _gpu("ms", "trace", "host time in malloc/free calls per step"),
    "empty_cache_call_count": _f(
        "count", "trace", "torch.cuda.empty_cache calls recorded (Python frames, ops) in the steps"
    ),
    "gpu_idle_alloc_frac": _gpu(
        "frac",
        "trace",
        "GPU window idle while a host thread sat in a device malloc/free call (taken out of "
        "gpu_idle_host_busy_frac)",
    ),
    "caching_allocator_disabled": _gpu(
        "bool",
        "obs",
        "PYTORCH_NO_CUDA_MEMORY_CACHING / PYTORCH_NO_HIP_MEMORY_CACHING set in the run's "
        "environment: every tensor is a cudaMalloc/cudaFree",
    ),
    "device_alloc_count": _gpu(
        "count", "obs", "memory_stats num_device_alloc over the run (cudaMalloc calls)"
    ),
    "trace_kernel_launch_count": _f(
        "count", "trace", "kernel and graph launch calls on the host, whole trace"
    ),
    "trace_copy_call_count": _f("count", "trace", "memcpy/memset calls on the host, whole trace"),
    "trace_cpu_op_count": _f("count", "trace", "CPU ops recorded, whole trace"),
    "trace_kernel_count": _f("count", "trace", "kernels on the GPU timeline, whole trace"),
    "trace_gpu_op_count": _f(
        "count", "trace", "kernels, copies and memsets on the GPU timeline, whole trace"
    ),
    "trace_gpu_unlaunched_count": _f(
        "count", "trace", "GPU ops whose launch call is not in the trace"
    ),
    "trace_profiler_range_count": _f(
        "count",
        "trace",
        "cuda_profiler_range events: kernels measured by CUPTI's range profiler (counters) "
        "instead of recorded on a timeline",
    ),
    "workload_kind": _f(
        "name",
        "trace",
        "training (backward ops or an optimizer step seen) or inference (neither, and generate, "
        "vLLM/SGLang, KV-cache or no_grad/inference_mode seen); None when the trace does not say",
    ),
    "workload_kind_evidence": _f("text", "trace", "what decided workload_kind, in words"),
    "graphs_or_compiled": _f(
        "bool", "trace", "CUDA/HIP graph launches or torch.compile frames in the trace"
    ),
    "gpu_step_count": _gpu(
        "count", "trace", "ProfilerStep copies on the GPU timeline (gpu_user_annotation)"
    ),
    "gpu_step_ms_p50": _gpu(
        "ms",
        "trace",
        "median GPU-side step: start to start of the GPU copies of ProfilerStep#N (the last "
        "one's own span); differs from the host's when the host runs ahead",
    ),
    "memory_history_entries": _gpu(
        "count",
        "memory",
        "allocator history entries in the snapshot; 0: its figures are the state at the "
        "snapshot, not a peak",
    ),
    "oom_request_bytes": _gpu(
        "bytes", "memory", "the request of the snapshot's last out-of-memory (its `oom` entry)"
    ),
    "oom_device_free_bytes": _gpu(
        "bytes", "memory", "free device memory when that request failed (device_free)"
    ),
    "memory_device": _gpu(
        "count",
        "memory",
        "the device the memory figures are of: the one that ran out of memory, else the one "
        "with the highest peak",
    ),
    "memory_devices": _gpu("count", "memory", "devices in the snapshot (segments or history)"),
    "memory_other_devices": _gpu(
        "name", "memory", "the snapshot's other devices in brief: peak, reserved, out-of-memory"
    ),
    "memory_cache_fragmented": _gpu(
        "bool",
        "memory",
        "the cache's free blocks added up to the failed request but none held it (True); the "
        "largest free block could hold it, or the free bytes were too few anyway (False); "
        "None without a failed request: free cached memory is then cached, reusable",
    ),
}

# Topics of `Facts.locations`: the user's file:line behind a finding, biggest share first.
LOCATION_TOPICS: dict[str, str] = {
    "data_loading": "Dataset/collate lines where data-loading time goes (share of it)",
    "host_sync": "lines issuing host syncs: .item(), .cpu(), print, synchronize (count per step)",
    "grad_without_backward": "forwards run with grad enabled whose graph no backward used",
    "htod_copy": "host-to-device copies (.to / .cuda), pageable ones first",
    "tensor_to_device": "tensors filled on the CPU then moved to the device each step",
    "misaligned_gemm": "fp16/bf16 GEMMs with a dimension not a multiple of 8",
    "dataloader_construct": "where the training DataLoader was constructed",
    "optimizer_construct": "where the optimizer was constructed",
    "zero_grad": "zero_grad(set_to_none=False) call sites",
    "conv_bias_before_bn": "Conv modules with bias followed by BatchNorm (definition lines)",
    "memory_peak": "top allocation sites at the memory peak",
    "memory_growth": "allocation sites whose live bytes grow across steps",
    "debug_mode": "where anomaly detection, a profiler or emit_nvtx was switched on",
}
