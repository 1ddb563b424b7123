"""A profiler trace -> TraceSummary: the per-step host and GPU facts the rules read.

Parsing lives in trace_events.py (msgspec -> numpy arrays), host-side facts in
trace_host.py, GPU facts in trace_gpu.py; this module ties them together. Per-step values
are over the ProfilerStep#N spans; a trace without them gives totals-based fractions only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfdoctor.analyze import trace_host
from perfdoctor.analyze.frames import UserCode
from perfdoctor.analyze.pytree import build_pytree
from perfdoctor.analyze.trace_events import TraceEvents, parse_trace
from perfdoctor.analyze.trace_gpu import GpuSummary, summarize_gpu
from perfdoctor.model import SourceLocation

log = logging.getLogger(__name__)

__all__ = ["GpuSummary", "TraceSummary", "load_trace", "parse_trace", "summarize_trace"]


@dataclass(frozen=True)
class TraceSummary:
    path: str
    steps: int
    step_numbers: tuple[int, ...]
    step_ms: tuple[float, ...]
    step_ms_p50: float | None
    host_syncs_per_step: float | None
    host_sync_ms_per_step: float | None
    host_sync_locations: tuple[SourceLocation, ...]
    aten_ops_per_step: float | None
    single_tensor_optimizer: bool | None
    zero_grad_zeroing: bool | None
    tensor_to_device_per_step: float | None
    conv_frac: float | None
    matmul_frac: float | None
    fp32_matmul_conv_frac: float | None
    op_share_basis: str  # "gpu_kernel_time" or "cpu_op_time"
    misaligned_lowp_gemm_count: int
    dataloader_ms_per_step: float | None
    data_loading_locations: tuple[SourceLocation, ...]
    comm_frac: float | None
    gpu: GpuSummary | None
    has_stacks: bool
    has_shapes: bool
    device_properties: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()


def load_trace(path: Path, user_roots: Sequence[str | Path] = ()) -> TraceSummary:
    """Parse and summarise one trace file (.json or .json.gz)."""
    return summarize_trace(parse_trace(path), user_roots)


def summarize_trace(ev: TraceEvents, user_roots: Sequence[str | Path] = ()) -> TraceSummary:
    user = UserCode(user_roots)
    steps = trace_host.find_steps(ev)
    notes: list[str] = []
    if not steps.count:
        notes.append("the trace has no ProfilerStep spans: per-step trace facts are missing")
    has_stacks = len(ev.python) > 0
    if not has_stacks:
        notes.append("the trace has no Python stacks (with_stack=False): no source lines")
    tree = build_pytree(ev.python) if has_stacks else None

    syncs = trace_host.host_syncs(ev, steps, tree, user)
    shares = trace_host.op_shares(ev, steps)
    loading = trace_host.data_loading(ev, steps, tree, user)
    zeroing, _ = trace_host.zero_grad_zeroing(ev)
    to_device = trace_host.tensors_created_then_copied(ev, steps)
    step_ms = steps.durations_ms()

    def per_step(value: float | None) -> float | None:
        return None if value is None else trace_host.per_step(value, steps)

    window = steps.total_us
    return TraceSummary(
        path=ev.path,
        steps=steps.count,
        step_numbers=steps.numbers,
        step_ms=tuple(float(x) for x in step_ms.tolist()),
        step_ms_p50=float(np.median(step_ms)) if step_ms.size else None,
        host_syncs_per_step=per_step(None if syncs.count is None else float(syncs.count)),
        host_sync_ms_per_step=per_step(
            None if syncs.blocked_us is None else syncs.blocked_us / 1000.0
        ),
        host_sync_locations=syncs.locations,
        aten_ops_per_step=per_step(float(trace_host.aten_ops_in_steps(ev, steps))),
        single_tensor_optimizer=trace_host.single_tensor_optimizer(ev),
        zero_grad_zeroing=zeroing,
        tensor_to_device_per_step=per_step(None if to_device is None else float(to_device)),
        conv_frac=shares.conv_frac,
        matmul_frac=shares.matmul_frac,
        fp32_matmul_conv_frac=shares.fp32_frac if len(ev.shapes) else None,
        op_share_basis=shares.basis,
        misaligned_lowp_gemm_count=shares.misaligned_lowp_gemms,
        dataloader_ms_per_step=per_step(loading.total_us / 1000.0),
        data_loading_locations=loading.locations,
        comm_frac=trace_host.comm_time(ev, steps) / window if window > 0 else None,
        gpu=summarize_gpu(ev, steps),
        has_stacks=has_stacks,
        has_shapes=len(ev.shapes) > 0,
        device_properties=ev.device_properties,
        notes=tuple(notes),
    )
