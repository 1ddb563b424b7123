"""FLOPs, achieved FLOP/s and MFU of a trace with shapes.

Each innermost GEMM/conv/attention op in the profiled steps (op_kernels.py) is counted from
its recorded shapes (op_flops.py). Its time is the GPU time of the kernels it launched (on a
CPU trace: the op's own wall time), its precision that of its longest GEMM/conv/attention
kernel (kernel_precision.py), or its input dtype when no kernel says. The step's rate is the
FLOPs over the steps' wall time, and MFU weighs each precision's FLOPs by the device's dense
peak for it: time_at_peak = sum(FLOPs_p / peak_p), MFU = time_at_peak / wall time, which is
FLOPs / (wall x peak) when one precision does all the work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfdoctor.analyze.device_peaks import DevicePeak
from perfdoctor.analyze.kernel_precision import FP32, UNKNOWN, KernelPrecision, dtype_precision
from perfdoctor.analyze.op_flops import conv_backward_key, op_flops
from perfdoctor.analyze.op_kernels import OpKernels
from perfdoctor.analyze.op_names import CONV_OPS
from perfdoctor.analyze.trace_events import TraceEvents
from perfdoctor.analyze.trace_index import Steps

TOP_OPS = 12
# A measured rate may pass the datasheet peak by this much before it is called impossible:
# the peak is at the boost clock, and a kernel's µs-rounded time is short by up to 1 µs.
PEAK_TOLERANCE = 1.05
# The op time basis of a GPU trace whose FLOP ops launched no recorded kernel.
NO_GPU_KERNELS = "none (no GPU kernels recorded for the ops)"
# One precision doing at least this share of the FLOPs names the denominator alone.
SINGLE_PRECISION_SHARE = 0.9


@dataclass(frozen=True)
class OpRate:
    """One op with one set of shapes and one precision, summed over its calls."""

    op: str
    shapes: str
    count: int
    flops: float
    bytes: float | None
    time_us: float | None  # its kernels' GPU time (CPU trace: the op's wall time)
    precision: str  # a peak key: fp8, bf16, tf32, fp32, fp32_matrix, ...

    @property
    def tflops(self) -> float | None:
        return self.flops / self.time_us / 1e6 if self.time_us else None

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved, with the least traffic the shapes allow."""
        return self.flops / self.bytes if self.bytes else None


@dataclass(frozen=True)
class FlopSummary:
    flops: float  # every counted op in the window
    steps: int  # 0 without ProfilerStep spans
    time_us: float  # the wall time the FLOPs were done in
    time_basis: str
    op_time_basis: str  # "GPU kernel time" or "CPU op time"
    flops_by_precision: dict[str, float]
    ops: tuple[OpRate, ...]  # by FLOPs, the first TOP_OPS
    counted_ops: int
    uncounted_ops: int  # FLOP ops whose shapes were missing or did not fit
    assumptions: tuple[str, ...]
    # Of the GEMM/conv/attention kernel time, the share launched by the counted ops: below 1
    # when custom ops (a fused MoE, a serving engine's attention) launch GEMMs with no aten
    # shapes to count, and the FLOPs and MFU are then a lower bound. None on a CPU trace.
    coverage: float | None = None
    # Ops whose rate came out above the device's peak for their precision, said in words:
    # their rate is withheld (a miscounted FLOP formula or a mislinked kernel time).
    over_peak: tuple[str, ...] = ()

    @property
    def flops_per_step(self) -> float | None:
        return self.flops / self.steps if self.steps else None

    @property
    def tflops(self) -> float | None:
        return self.flops / self.time_us / 1e6 if self.time_us > 0 else None


@dataclass(frozen=True)
class Utilization:
    mfu: float | None
    peak_tflops: float | None  # the denominator (FLOP-weighted across precisions)
    peak_text: str | None  # "989.5 TFLOP/s dense bf16, H100 SXM"
    source: str | None
    missing: str | None  # why there is no MFU
    over_peak: bool = False  # the FLOPs over the wall time came out above the peak


def flop_summary(
    ev: TraceEvents, steps: Steps, found: OpKernels, classes: list[KernelPrecision]
) -> FlopSummary | None:
    if not ev.shapes or found.ops.size == 0:
        return None
    ops = ev.cpu_ops
    on_gpu = found.kernels.size > 0
    # A GPU trace whose kernels were not linked or not recorded: the ops' CPU time is the
    # time to launch them, not to compute them (an A100 trace without its GPU side showed an
    # aten::mm at 1,273 TFLOP/s). Such ops get no time, so no rate.
    cpu_time_means_compute = on_gpu or not (ev.devices or len(ev.gpu))
    durs = ev.gpu.dur[found.kernels] if on_gpu else np.empty(0)
    kernel_time = np.zeros(found.ops.size)
    if on_gpu:
        owned = found.owner >= 0
        np.add.at(kernel_time, found.owner[owned], durs[owned])
    best = _longest_family_kernel(found, classes, durs)
    groups: dict[tuple[str, str, str], list[float]] = {}
    by_precision: dict[str, float] = {}
    assumptions: set[str] = set()
    total = 0.0
    uncounted = 0
    counted_ops: set[int] = set()
    conv_out = _conv_outputs(ev, found)
    for i, row in enumerate(found.ops.tolist()):
        name = ev.names[int(ops.name[row])]
        types, dims = ev.shapes.get(row, ([], []))
        out = conv_out.get(_conv_key(dims)) if name in CONV_OPS else None
        counted = op_flops(name, types, dims, ev.concrete.get(row, ()), conv_out=out)
        if counted is None:
            uncounted += 1
            continue
        counted_ops.add(i)
        if counted.assumption:
            assumptions.add(counted.assumption)
        cls = best.get(i)
        precision = _peak_key(cls, counted.dtype)
        if on_gpu:
            time = float(kernel_time[i])
        else:
            time = float(ops.dur[row]) if cpu_time_means_compute else 0.0
        total += counted.flops
        by_precision[precision] = by_precision.get(precision, 0.0) + counted.flops
        key = (name, _shape_text(dims), precision)
        acc = groups.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += counted.flops
        acc[2] = acc[2] + counted.bytes if counted.bytes is not None else np.nan
        acc[3] += time
    if total <= 0:
        return None
    rates = sorted(
        (
            OpRate(
                op=name,
                shapes=shapes,
                count=int(acc[0]),
                flops=acc[1],
                bytes=None if np.isnan(acc[2]) else acc[2],
                time_us=acc[3] if acc[3] > 0 else None,
                precision=precision,
            )
            for (name, shapes, precision), acc in groups.items()
        ),
        key=lambda r: -r.flops,
    )
    time_us, basis = _wall_time(ev, steps, found)
    return FlopSummary(
        flops=total,
        steps=steps.count,
        time_us=time_us,
        time_basis=basis,
        op_time_basis=(
            "GPU kernel time"
            if on_gpu
            else "CPU op time"
            if cpu_time_means_compute
            else NO_GPU_KERNELS
        ),
        flops_by_precision=dict(sorted(by_precision.items(), key=lambda kv: -kv[1])),
        ops=tuple(rates[:TOP_OPS]),
        counted_ops=found.ops.size - uncounted,
        uncounted_ops=uncounted,
        assumptions=tuple(sorted(assumptions)),
        coverage=_coverage(found, classes, durs, counted_ops) if on_gpu else None,
    )


def _coverage(
    found: OpKernels, classes: list[KernelPrecision], durs: np.ndarray, counted: set[int]
) -> float | None:
    family = np.array([c.family is not None for c in classes], dtype=bool)
    total = float(durs[family].sum())
    if total <= 0:
        return None
    mine = family & np.isin(found.owner, np.fromiter(counted, dtype=np.int64))
    return float(durs[mine].sum()) / total


def utilization(
    flops_by_precision: dict[str, float], time_us: float, peak: DevicePeak | None, why: str
) -> Utilization:
    """MFU of `flops_by_precision` done in `time_us` on `peak`'s device; `why` says what is
    missing when `peak` is None (an unknown device)."""
    if peak is None:
        return Utilization(None, None, None, None, why)
    at_peak_s = 0.0
    counted = 0.0
    lacking = []
    for precision, flops in flops_by_precision.items():
        rate = peak.peak(*_split_key(precision))
        if rate is None and peak.estimate:
            rate = peak.peak(FP32)  # a CPU computes 16-bit matmuls through fp32 FMAs
        if rate is None:
            lacking.append(precision)
            continue
        at_peak_s += flops / (rate * 1e12)
        counted += flops
    total = sum(flops_by_precision.values())
    if counted <= 0 or time_us <= 0:
        missing = f"{peak.name} has no listed peak for {', '.join(lacking) or 'these ops'}"
        return Utilization(None, None, None, peak.source, missing)
    effective = counted / at_peak_s / 1e12
    mfu = at_peak_s / (time_us * 1e-6)
    if not peak.estimate and mfu > PEAK_TOLERANCE:
        # More work than the device can do in the window: the FLOPs are miscounted or the
        # window misses part of the run. Saying so beats printing an MFU above 100%.
        missing = (
            f"the counted FLOPs over {time_us / 1000:,.4g} ms would be {mfu:.0%} of the "
            f"{peak.name}'s peak, which no device reaches: the FLOP count or the window is wrong"
        )
        return Utilization(None, None, None, peak.source, missing, over_peak=True)
    kind = "estimated" if peak.estimate else "dense"
    main, main_flops = max(flops_by_precision.items(), key=lambda kv: kv[1])
    if main_flops >= SINGLE_PRECISION_SHARE * total and main not in lacking:
        text = f"{effective:,.4g} TFLOP/s {kind} {_label(main)}, {peak.name}"
    else:
        mix = ", ".join(
            f"{_label(p)} {peak.peak(*_split_key(p)) or 0:,.4g}"
            for p in flops_by_precision
            if p not in lacking
        )
        text = f"{effective:,.4g} TFLOP/s {kind}, FLOP-weighted over {mix}, {peak.name}"
    if lacking:
        text += f" (no peak for {', '.join(lacking)}: those FLOPs left out)"
    return Utilization(mfu, effective, text, peak.source, None)


def within_peak(flops: FlopSummary, peak: DevicePeak | None) -> FlopSummary:
    """`flops` with every per-op rate above the device's peak for its precision withheld,
    and said: such a rate is a miscount (the V100 ResNet traces drew fp32 convolutions at 33
    to 55 TFLOP/s above a 15.7 TFLOP/s roof), never a measurement. A CPU's peak is an
    estimate, so its rates are left as they are."""
    if peak is None or peak.estimate:
        return flops
    ops, said = [], []
    for op in flops.ops:
        limit = peak.peak(*_split_key(op.precision))
        rate = op.tflops
        if limit and rate is not None and rate > limit * PEAK_TOLERANCE:
            said.append(
                f"{op.op} ({op.shapes}, {_label(op.precision)}): its FLOPs over its kernel time "
                f"give {rate:,.4g} TFLOP/s, above the {peak.name}'s {limit:,.4g} TFLOP/s peak, "
                "so its FLOPs or its time are miscounted and no rate is shown"
            )
            op = replace(op, time_us=None)
        ops.append(op)
    if not said:
        return flops
    return replace(flops, ops=tuple(ops), over_peak=tuple(said))


def _conv_outputs(ev: TraceEvents, found: OpKernels) -> dict[Any, list[int]]:
    """(input shape, weight shape) -> output shape, from the trace's convolution backwards:
    their gradient has the output's shape, which the forward's recorded inputs do not give."""
    out: dict[Any, list[int]] = {}
    for row in found.ops.tolist():
        name = ev.names[int(ev.cpu_ops.name[row])]
        dims = ev.shapes.get(row, ([], []))[1]
        backward = conv_backward_key(name, dims)
        if backward is not None:
            key, grad = backward
            out[key] = grad
    return out


def _conv_key(dims: list[Any]) -> Any:
    if len(dims) < 2 or not all(isinstance(d, list) for d in dims[:2]):
        return None
    return tuple(dims[0]), tuple(dims[1])


def _longest_family_kernel(
    found: OpKernels, classes: list[KernelPrecision], durs: np.ndarray
) -> dict[int, KernelPrecision]:
    best: dict[int, tuple[float, KernelPrecision]] = {}
    for owner, cls, dur in zip(found.owner.tolist(), classes, durs.tolist(), strict=True):
        if owner < 0 or cls.family is None or cls.precision == UNKNOWN:
            continue
        if owner not in best or dur > best[owner][0]:
            best[owner] = (dur, cls)
    return {k: v[1] for k, v in best.items()}


def _peak_key(cls: KernelPrecision | None, dtype: str | None) -> str:
    if cls is not None:
        if cls.precision == FP32 and cls.matrix_cores:
            return "fp32_matrix"
        return cls.precision
    precision = dtype_precision(dtype)
    return precision if precision != UNKNOWN else FP32


def _split_key(key: str) -> tuple[str, bool | None]:
    return (FP32, True) if key == "fp32_matrix" else (key, None)


def _label(key: str) -> str:
    return "fp32 (matrix cores)" if key == "fp32_matrix" else key


def _wall_time(ev: TraceEvents, steps: Steps, found: OpKernels) -> tuple[float, str]:
    if steps.count:
        return steps.total_us, f"{steps.count} profiled step(s)"
    if found.kernels.size:
        start = float(ev.gpu.ts[found.kernels].min())
        end = float(ev.gpu.end[found.kernels].max())
        return end - start, "first to last kernel (the trace has no ProfilerStep)"
    ops = ev.cpu_ops
    return float(ops.end.max() - ops.ts.min()), "first to last op (the trace has no steps)"


def _shape_text(dims: list[object]) -> str:
    return " ".join(
        "x".join(str(d) for d in shape) for shape in dims if isinstance(shape, list) and shape
    )
