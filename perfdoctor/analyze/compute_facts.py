"""Facts and report data for what the step computes: its kernels' precision mix, its FLOPs,
achieved FLOP/s and MFU.

Two sources of FLOPs. In a `perfdoctor profile` run the child counts one warm-up step with
FlopCounterMode (collect/flop_count.py): the FLOPs of the step the script runs, over the
timed steps' median wall time (timed steps run without profiler or counter). A trace with
shapes gives them op by op (flop_rate.py), over the profiled steps' wall time, with each
op's own kernel time and precision. The counter wins where both exist; the trace still gives
the per-op table and the precision split the MFU denominator needs.
"""

from __future__ import annotations

from typing import Any

from perfdoctor.analyze.compute_summary import ComputeSummary
from perfdoctor.analyze.device_peaks import (
    DevicePeak,
    cpu_peak,
    find_peak,
    memory_bandwidth_tbps,
)
from perfdoctor.analyze.flop_rate import NO_GPU_KERNELS, Utilization, utilization
from perfdoctor.analyze.kernel_precision import dtype_precision
from perfdoctor.analyze.record import RunRecord
from perfdoctor.run_schema import Observations

COUNTER = "FlopCounterMode, one warm-up step"


def compute_facts(record: RunRecord, values: dict[str, Any]) -> dict[str, Any]:
    """The compute facts; `values` are the facts derived so far (step_ms_p50, autocast)."""
    out: dict[str, Any] = {}
    compute = record.trace.compute if record.trace is not None else None
    mix = compute.mix if compute is not None else None
    if mix is not None:
        out.update(
            {
                "matmul_kernel_frac": mix.matmul_frac,
                "lowp_matmul_kernel_frac": mix.lowp_frac,
                "fp32_matmul_kernel_frac": mix.fp32_frac,
                "unknown_precision_matmul_frac": mix.unknown_frac,
                "compute_precision": mix.dominant,
                # trace_gpu's share classifies names alone; with the launching op's dtype a
                # Triton or attention kernel named without one is known too (attn_fwd).
                "tensor_core_kernel_frac": mix.matrix_frac,
            }
        )
    rate = _rate(record, values, compute)
    if rate is not None:
        out.update(rate)
    return out


def compute_settings(record: RunRecord) -> dict[str, Any]:
    """Report.compute: the per-op table and the precision split ({} when nothing counted)."""
    compute = record.trace.compute if record.trace is not None else None
    out: dict[str, Any] = {}
    if compute is not None and compute.mix is not None:
        out["kernel_precision"] = dict(compute.mix.by_class)
    flops = compute.flops if compute is not None else None
    if flops is not None:
        out["trace"] = {
            "flops": flops.flops,
            "time_ms": flops.time_us / 1000.0,
            "time_basis": flops.time_basis,
            "op_time_basis": flops.op_time_basis,
            "counted_ops": flops.counted_ops,
            "uncounted_ops": flops.uncounted_ops,
            "coverage": flops.coverage,
            "assumptions": list(flops.assumptions),
            "over_peak": list(flops.over_peak),
            "flops_by_precision": dict(flops.flops_by_precision),
            "ops": [
                {
                    "op": r.op,
                    "shapes": r.shapes,
                    "count": r.count,
                    "flops": r.flops,
                    "bytes": r.bytes,
                    "time_ms": r.time_us / 1000.0 if r.time_us else None,
                    "tflops": r.tflops,
                    "intensity": r.intensity,
                    "precision": r.precision,
                }
                for r in flops.ops
            ],
        }
    counted = record.observed.flop_count
    if counted is not None:
        out["counter"] = {
            "flops_per_step": counted.flops_per_step,
            "by_op": dict(counted.by_op or {}),
            "skipped": counted.skipped,
        }
    peak = _peak(record, compute)
    if peak is not None:
        name = compute.device if compute is not None else None
        out["peak"] = {
            "device": peak.name,
            "tflops": dict(peak.tflops),
            "source": peak.source,
            "memory_tbps": memory_bandwidth_tbps(peak, name),
        }
    return out


def _rate(
    record: RunRecord, values: dict[str, Any], compute: ComputeSummary | None
) -> dict[str, Any] | None:
    counted = record.observed.flop_count
    step_ms = values.get("step_ms_p50")
    flops = compute.flops if compute is not None else None
    peak = _peak(record, compute)
    why = _why_no_peak(record, compute)
    out: dict[str, Any] = {}
    if counted is not None and counted.flops_per_step and isinstance(step_ms, (int, float)):
        total = float(counted.flops_per_step)
        split = _precision_split(total, flops.flops_by_precision if flops else None, values)
        use = utilization(split, step_ms * 1000.0, peak, why)
        out["flops_per_step"] = total
        out["flops_source"] = COUNTER
        out["achieved_tflops"] = (
            total / (step_ms * 1e9) if step_ms > 0 and not use.over_peak else None
        )
        if counted.counted_step_ms is not None and counted.previous_step_ms is not None:
            out["flop_count_cost_ms"] = counted.counted_step_ms - counted.previous_step_ms
    elif flops is not None:
        use = (
            compute.utilization
            if compute is not None and compute.utilization is not None
            else utilization(flops.flops_by_precision, flops.time_us, peak, why)
        )
        out["flops_per_step"] = flops.flops_per_step
        out["flops_source"] = f"trace shapes ({flops.counted_ops} ops, {flops.time_basis})"
        # Without the GPU's kernels the wall time says nothing of when the GPU did the work;
        # above the peak the rate is a miscount (use.missing says which).
        kernelless = flops.op_time_basis == NO_GPU_KERNELS
        out["achieved_tflops"] = None if kernelless or use.over_peak else flops.tflops
    else:
        if counted is not None and counted.skipped:
            out["flops_source"] = f"not counted: {counted.skipped}"
        return out or None
    out.update(_utilization_facts(use))
    return out


def _utilization_facts(use: Utilization) -> dict[str, Any]:
    return {
        "mfu_frac": use.mfu,
        "mfu_peak_tflops": use.peak_tflops,
        "mfu_peak": use.peak_text,
        "mfu_missing": use.missing,
    }


def _precision_split(
    total: float, trace_split: dict[str, float] | None, values: dict[str, Any]
) -> dict[str, float]:
    """The counter's FLOPs in the trace's precision proportions; without a trace, the
    autocast dtype (bf16/fp16) or fp32."""
    if trace_split:
        whole = sum(trace_split.values())
        return {k: total * v / whole for k, v in trace_split.items()}
    dtype = values.get("autocast_dtype") if values.get("autocast_used") else None
    precision = dtype_precision(str(dtype)) if dtype else "fp32"
    return {precision if precision != "unknown" else "fp32": total}


def _peak(record: RunRecord, compute: ComputeSummary | None) -> DevicePeak | None:
    if compute is not None and compute.peak is not None:
        return compute.peak
    device = record.observed.device
    if device is not None and device.kind == "cuda":
        return find_peak(device.name)
    if device is not None and device.kind == "cpu":
        return _cpu(record.observed)
    return None


def _cpu(observed: Observations) -> DevicePeak | None:
    cpu = observed.cpu
    if cpu is None:
        return None
    cores = cpu.physical_cores or cpu.logical_cores
    if cores and cpu.affinity_cores:
        cores = min(cores, cpu.affinity_cores)
    return cpu_peak({"cores": cores, "mhz": cpu.mhz, "flags": " ".join(cpu.isa_flags or [])})


def _why_no_peak(record: RunRecord, compute: ComputeSummary | None) -> str:
    device = record.observed.device
    name = (compute.device if compute is not None else None) or (
        device.name if device is not None else None
    )
    if device is not None and device.kind == "cpu":
        return "the CPU's clock or core count is unknown, so no peak could be estimated"
    if name:
        return f"the device '{name}' is not in the peak table (analyze/device_peaks.py)"
    return "the device is unknown (no deviceProperties in the trace, no device observed)"
