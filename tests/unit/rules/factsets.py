"""Realistic well-tuned fact sets (CPU and GPU) and `make_facts(**overrides)` for rule tests.

CPU_TUNED is shaped like a tuned tabular MLP trained on this 2-core CPU machine: no DataLoader
stalls, threads = cores, fused optimizer, no debug modes. GPU_TUNED is shaped like a tuned
GPT-style model on an H100: bf16 autocast, TF32 on, compiled, pinned 4-worker DataLoader,
GPU busy 94%. GPU_CNN_TUNED adds a tuned conv net (channels_last, cudnn.benchmark on).
"""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Scalar, SourceLocation

GIB = 1024**3
MIB = 1024**2

CPU_TUNED: dict[str, Scalar] = {
    # device / run
    "device_is_cuda": False,
    "device_count": 1,
    "cpu_cores_logical": 2,
    "cpu_cores_physical": 2,
    "steps_timed": 20,
    "step_detection": "optimizer",
    "loop_long_step_frac": 0.0,  # a loop that only trains (analyze/loop_account.py)
    "loop_timed_step_frac": 1.0,
    # step timing
    "step_ms_p50": 12.0,
    "step_ms_p90": 13.1,
    "step_ms_mean": 12.3,
    "step_jitter_ratio": 1.09,
    # the same phase at its median against its fastest timed instance (quiet: near 1)
    "phase_stall_ratio": 1.2,
    "phase_stall_phase": "backward",
    "phase_stall_median_ms": 5.4,
    "phase_stall_fastest_ms": 4.5,
    "data_wait_ms_p50": 0.2,
    "data_wait_frac": 0.015,
    "forward_frac": 0.35,
    "backward_frac": 0.45,
    "optimizer_frac": 0.08,
    "other_frac": 0.105,
    "micro_batches_per_step": 1,
    "batch_size": 64,
    "throughput_samples_s": 5300.0,
    "rss_growth_bytes_per_step": 2048.0,
    "rss_bytes_max": 400 * MIB,
    "loss_is_finite": True,
    # settings
    "dataloader_count": 1,
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": False,
    "dataloader_prefetch_factor": None,
    "dataloader_persistent_workers": False,
    "dataloader_is_iterable": False,
    "torch_num_threads": 2,
    "anomaly_detection_enabled": False,
    "user_profiler_active": False,
    "emit_nvtx_enabled": False,
    "grad_forwards_without_backward": 0,
    "grad_forwards_without_backward_frac": 0.0,
    "cudnn_benchmark": False,
    "cudnn_deterministic": False,
    "deterministic_algorithms": False,
    "tf32_matmul_enabled": False,
    "autocast_used": False,
    "autocast_dtype": None,
    "grad_scaler_used": False,
    "optimizer_class": "AdamW",
    "optimizer_count": 1,
    "optimizer_impl": "fused",
    "zero_grad_set_to_none": True,
    "model_param_count": 200_000,
    "model_conv_count": 0,
    "model_channels_last": False,
    "model_compiled": False,
    "conv_bias_before_bn_count": 0,
    "uses_data_parallel": False,
    "uses_ddp": False,
    "dist_backend": None,
    "world_size": 1,
    "recompile_count": 0,
    # compiled without a break, a recompile or a cudagraph skip (analyze/compile_facts.py)
    "compile_graph_break_sites": 0,
    "compile_break_step_frac": 0.0,
    "compile_recompile_step_frac": 0.0,
    "cudagraph_skip_count": 0,
    "input_shape_changes": 1,
    # trace (CPU side)
    "trace_steps": 3,
    "trace_step_ms_p50": 14.0,
    "host_syncs_per_step": 1,
    "host_sync_ms_per_step": 0.01,
    "cpu_op_count_per_step": 120,
    "single_tensor_optimizer": False,
    "zero_grad_zeroing": False,
    "tensor_to_device_per_step": 0,
    "conv_ms_frac": 0.0,
    "matmul_ms_frac": 0.55,
    "fp32_matmul_conv_frac": 0.55,
    "misaligned_lowp_gemm_count": 0,
    "dataloader_trace_ms_per_step": 0.2,
    "comm_frac": 0.0,
    # samples
    "cpu_util_mean_frac": 0.9,
    "cpu_busy_cores": 1.8,
    "cpu_other_busy_cores": 0.05,
}

GPU_TUNED: dict[str, Scalar] = {
    **CPU_TUNED,
    "device_is_cuda": True,
    "gpu_compute_capability": "9.0",
    "device_total_memory_bytes": 80 * GIB,
    "cpu_cores_logical": 16,
    "cpu_cores_physical": 8,
    "step_ms_p50": 85.0,
    "step_ms_p90": 88.0,
    "step_ms_mean": 85.5,
    "step_jitter_ratio": 1.035,
    "data_wait_ms_p50": 0.4,
    "data_wait_frac": 0.005,
    "forward_frac": 0.2,
    "backward_frac": 0.3,
    "optimizer_frac": 0.03,
    "other_frac": 0.465,
    "batch_size": 32,
    "rss_growth_bytes_per_step": 0.0,
    "rss_bytes_max": 3 * GIB,
    "cuda_allocated_growth_bytes_per_step": 0.0,
    "dataloader_num_workers": 4,
    "dataloader_pin_memory": True,
    "dataloader_prefetch_factor": 2,
    "dataloader_persistent_workers": True,
    "torch_num_threads": 8,
    "cudnn_benchmark": True,
    "tf32_matmul_enabled": True,
    "autocast_used": True,
    "autocast_dtype": "bfloat16",
    "model_param_count": 124_000_000,
    "model_compiled": True,
    "host_syncs_per_step": 0,
    "host_sync_ms_per_step": 0.0,
    "cpu_op_count_per_step": 900,
    "matmul_ms_frac": 0.62,
    "fp32_matmul_conv_frac": 0.03,
    # trace (GPU side)
    "gpu_busy_frac": 0.94,
    "gpu_idle_host_wait_frac": 0.02,
    "gpu_idle_launch_gap_frac": 0.03,
    "kernels_per_step": 640,
    "kernel_us_p50": 48.0,
    "memcpy_htod_ms_per_step": 0.3,
    "memcpy_dtoh_ms_per_step": 0.01,
    "pageable_htod_count_per_step": 0,
    "pageable_htod_frac": 0.0,
    "tensor_core_kernel_frac": 0.72,
    "triton_kernel_count_per_step": 300,
    "comm_kernel_frac": 0.0,
    # memory
    "peak_allocated_bytes": 52 * GIB,
    "peak_reserved_bytes": 58 * GIB,
    "peak_allocated_frac": 0.65,
    "fragmentation_frac": 0.1,
    "alloc_retries": 0,
    "oom_events": 0,
    "activation_bytes_frac": 0.55,
    # samples
    "gpu_util_mean_frac": 0.97,
    "gpu_power_w_mean": 620.0,
    "energy_j_per_step": 52.0,
    "gpu_throttled_frac": 0.0,
    "sm_active_frac": 0.7,
    "tensor_active_frac": 0.45,
    "cpu_util_mean_frac": 0.3,
    "cpu_busy_cores": 2.2,
}

GPU_CNN_TUNED: dict[str, Scalar] = {
    **GPU_TUNED,
    "model_param_count": 25_000_000,
    "model_conv_count": 53,
    "model_channels_last": True,
    "model_compiled": False,
    "conv_ms_frac": 0.62,
    "matmul_ms_frac": 0.02,
    "fp32_matmul_conv_frac": 0.01,
    "input_shape_changes": 2,  # the last partial batch
    "triton_kernel_count_per_step": 0,
}

BASES: dict[str, Mapping[str, Scalar]] = {
    "cpu": CPU_TUNED,
    "gpu": GPU_TUNED,
    "gpu_cnn": GPU_CNN_TUNED,
}


def make_facts(
    base: str = "cpu",
    locations: Mapping[str, tuple[SourceLocation, ...]] | None = None,
    **overrides: Scalar,
) -> Facts:
    """A copy of a tuned fact set with some facts changed (None = not measured)."""
    values = {**BASES[base], **overrides}
    return Facts(values=values, locations=dict(locations or {}))
