"""What the step computes and how fast: the precision mix of its GEMM/conv/attention kernels
(kernel_mix.py) and its FLOPs, achieved FLOP/s and MFU (flop_rate.py), from one trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.device_peaks import DevicePeak, find_peak
from perfdoctor.analyze.flop_rate import (
    FlopSummary,
    Utilization,
    flop_summary,
    utilization,
    within_peak,
)
from perfdoctor.analyze.kernel_mix import KernelMix, kernel_classes, kernel_mix
from perfdoctor.analyze.op_kernels import flop_op_kernels
from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, TraceEvents
from perfdoctor.analyze.trace_index import Steps


@dataclass(frozen=True)
class ComputeSummary:
    mix: KernelMix | None  # None without kernels
    flops: FlopSummary | None  # None without shapes
    device: str | None  # the GPU's name as the trace writes it
    peak: DevicePeak | None
    utilization: Utilization | None  # None without FLOPs or on a CPU trace (see facts.py)


def summarize_compute(ev: TraceEvents, steps: Steps) -> ComputeSummary:
    found = flop_op_kernels(ev, steps)
    classes = kernel_classes(ev, found)
    mix = kernel_mix(ev, found, classes) if found.kernels.size else None
    flops = flop_summary(ev, steps, found, classes)
    name, peak = _device_peak(ev)
    if flops is not None:
        flops = within_peak(flops, peak)
    use = None
    if flops is not None and _no_gpu_kernels(ev):
        # The GPU side was not recorded: FLOPs over wall time against the GPU's peak would
        # credit the GPU with work the trace never saw it do.
        use = Utilization(None, None, None, None, NO_KERNELS_WHY)
    elif flops is not None and flops.over_peak:
        # An op counted past the device's peak is a miscount, and the step's FLOPs hold it:
        # a V100 trace read "MFU 87%" at 22% busy that way.
        why = (
            f"{len(flops.over_peak)} op(s) were counted above the device's peak (see the ops "
            "table), so the step's FLOP count is not trusted"
        )
        use = Utilization(None, None, None, peak.source if peak else None, why, over_peak=True)
    elif flops is not None and len(ev.gpu):
        why = (
            f"the device '{name}' is not in the peak table (analyze/device_peaks.py)"
            if name
            else "the trace does not name its GPU (no deviceProperties)"
        )
        use = utilization(flops.flops_by_precision, flops.time_us, peak, why)
    return ComputeSummary(mix, flops, name, peak, use)


NO_KERNELS_WHY = (
    "the trace names a GPU but recorded no GPU kernels (its GPU side was not captured): "
    "the ops' CPU time is the time to launch them, so no GPU MFU or per-op rate can be measured"
)


def _no_gpu_kernels(ev: TraceEvents) -> bool:
    """A GPU trace (deviceProperties, or GPU rows) with no kernel at all."""
    if not (ev.devices or len(ev.gpu)):
        return False
    return not bool((ev.gpu.col("kind") == GPU_KIND_KERNEL).any()) if len(ev.gpu) else True


def _device_peak(ev: TraceEvents) -> tuple[str | None, DevicePeak | None]:
    devices = ev.devices
    if not devices:
        return None, None
    busiest = None
    if len(ev.gpu):
        ids, counts = np.unique(ev.gpu.col("device"), return_counts=True)
        busiest = int(ids[np.argmax(counts)])
    device = next((d for d in devices if d.index == busiest), devices[0])
    peak = find_peak(device.name, gfx=device.gfx_version, compute_units=device.sm_count)
    return device.name, peak
