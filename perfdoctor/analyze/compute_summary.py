"""What the step computes and how fast: the precision mix of its GEMM/conv/attention kernels
(kernel_mix.py) and its FLOPs, achieved FLOP/s and MFU (flop_rate.py), from one trace."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.analyze.device_peaks import DevicePeak, find_peak
from perfdoctor.analyze.flop_rate import FlopSummary, Utilization, flop_summary, utilization
from perfdoctor.analyze.kernel_mix import KernelMix, kernel_classes, kernel_mix
from perfdoctor.analyze.op_kernels import flop_op_kernels
from perfdoctor.analyze.trace_events import TraceEvents
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
    use = None
    if flops is not None and len(ev.gpu):
        why = (
            f"the device '{name}' is not in the peak table (analyze/device_peaks.py)"
            if name
            else "the trace does not name its GPU (no deviceProperties)"
        )
        use = utilization(flops.flops_by_precision, flops.time_us, peak, why)
    return ComputeSummary(mix, flops, name, peak, use)


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
