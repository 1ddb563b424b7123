"""A profiler trace -> TraceSummary: the per-step host and GPU facts the rules read.

Parsing is in trace_events.py (msgspec -> numpy arrays); the analyses are in trace_host.py
(syncs, optimizer, copies, comms), trace_ops.py (conv/GEMM/precision), dataloading.py and
trace_gpu.py; this module runs them. Per-step values are over the ProfilerStep#N spans; a
trace without them still gives fractions, and per-step values are None.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfdoctor.analyze import trace_host
from perfdoctor.analyze.attribution import Attributor
from perfdoctor.analyze.comm_trace import CommSummary, summarize_comm
from perfdoctor.analyze.compute_summary import ComputeSummary, summarize_compute
from perfdoctor.analyze.dataloading import data_loading
from perfdoctor.analyze.frames import UserCode
from perfdoctor.analyze.pytree import build_pytree
from perfdoctor.analyze.timeline_facts import timeline_facts
from perfdoctor.analyze.trace_compiled import CompiledRegions, compiled_regions
from perfdoctor.analyze.trace_events import (
    MAX_MSG_NELEMS,
    MAX_TENSOR_ELEMENTS,
    TraceEvents,
    parse_trace,
)
from perfdoctor.analyze.trace_gpu import GpuSummary, summarize_gpu
from perfdoctor.analyze.trace_index import find_steps
from perfdoctor.analyze.trace_ops import op_shares
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
    host_syncs_per_step: float | None  # None on CPU-only traces (nothing to wait for)
    host_sync_ms_per_step: float | None
    aten_ops_per_step: float | None
    single_tensor_optimizer: bool | None
    zero_grad_zeroing: bool | None
    tensor_to_device_per_step: float | None  # None without GPU copies in the trace
    conv_frac: float | None
    matmul_frac: float | None
    fp32_matmul_conv_frac: float | None  # None without record_shapes
    op_share_basis: str  # "gpu_kernel_time" or "cpu_op_time"
    misaligned_lowp_gemm_count: int | None  # None without record_shapes
    misaligned_gemm_dims: tuple[int, ...]
    embedding_rows: int | None  # the largest embedding table's rows (a vocabulary)
    dataloader_ms_per_step: float | None
    comm_frac: float | None
    gpu: GpuSummary | None
    has_stacks: bool
    python_frames: int  # python_function events (with_stack=True)
    has_shapes: bool
    # Facts.locations topics (fact_catalog.LOCATION_TOPICS) found in the trace.
    locations: Mapping[str, tuple[SourceLocation, ...]] = field(default_factory=dict)
    device_properties: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    comm: CommSummary | None = None  # the collectives, by type (comm_trace.py)
    # Allocator, capture, workload kind, GPU-side step (analyze/timeline_facts.py): facts.
    timeline_facts: Mapping[str, Any] = field(default_factory=dict)
    compute: ComputeSummary | None = None  # precision mix, FLOPs, MFU (compute_summary.py)
    compiled: CompiledRegions | None = None  # torch.compile'd regions (trace_compiled.py)


def load_trace(path: Path, user_roots: Sequence[str | Path] = ()) -> TraceSummary:
    """Parse and summarise one trace file (.json or .json.gz)."""
    return summarize_trace(parse_trace(path), user_roots)


def summarize_trace(ev: TraceEvents, user_roots: Sequence[str | Path] = ()) -> TraceSummary:
    steps = find_steps(ev)
    notes: list[str] = []
    if not steps.count:
        notes.append("the trace has no ProfilerStep spans: per-step trace facts are missing")
    has_stacks = len(ev.python) > 0
    if not has_stacks:
        notes.append("the trace has no Python stacks (with_stack=False): no source lines")
    tree = build_pytree(ev.python) if has_stacks else None
    attributor = Attributor(ev, tree, UserCode(user_roots))

    syncs = trace_host.host_syncs(ev, steps, attributor)
    shares = op_shares(ev, steps, attributor)
    user_flags = attributor.user_flags() if has_stacks else np.empty(0, dtype=bool)
    loading = data_loading(ev, steps, tree, user_flags)
    zero_grad = trace_host.zero_grad_zeroing(ev, steps, attributor)
    copies = trace_host.host_to_device_copies(ev, steps, attributor)
    step_ms = steps.durations_ms()
    window = steps.total_us
    comm = summarize_comm(ev)
    if ev.invalid_shapes:
        notes.append(
            f"invalid input: {ev.invalid_shapes} op(s) record input shapes no tensor can have "
            f"(a negative size or over {MAX_TENSOR_ELEMENTS:,} elements); their shapes and "
            "FLOPs are ignored"
        )
    if ev.invalid_comm_args:
        notes.append(
            f"invalid input: {ev.invalid_comm_args} collective op(s) or kernel(s) record a "
            "message size or group size no collective can have (negative, not a number, "
            f"over {MAX_MSG_NELEMS:,} elements); those values are ignored"
        )
    if comm is not None and comm.impossible_sizes:
        notes.append(
            f"invalid input: {comm.impossible_sizes} collective(s) record a message size "
            "that no link could move in the kernel's time; those sizes are ignored"
        )
    gpu = summarize_gpu(ev, steps)
    locations = {
        "host_sync": syncs.locations,
        "data_loading": loading.locations,
        "htod_copy": copies.htod_locations,
        "tensor_to_device": copies.created_locations,
        "misaligned_gemm": shares.misaligned_locations,
        "zero_grad": zero_grad.locations,
    }
    return TraceSummary(
        path=ev.path,
        steps=steps.count,
        step_numbers=steps.numbers,
        step_ms=tuple(step_ms.tolist()),
        step_ms_p50=float(np.median(step_ms)) if step_ms.size else None,
        host_syncs_per_step=steps.per_step(None if syncs.count is None else float(syncs.count)),
        host_sync_ms_per_step=steps.per_step(
            None if syncs.blocked_us is None else syncs.blocked_us / 1000.0
        ),
        aten_ops_per_step=steps.per_step(float(trace_host.aten_ops_in_steps(ev, steps))),
        single_tensor_optimizer=trace_host.single_tensor_optimizer(ev),
        zero_grad_zeroing=zero_grad.zeroing,
        tensor_to_device_per_step=steps.per_step(
            None if copies.created_then_copied is None else float(copies.created_then_copied)
        ),
        conv_frac=shares.conv_frac,
        matmul_frac=shares.matmul_frac,
        fp32_matmul_conv_frac=shares.fp32_frac,
        op_share_basis=shares.basis,
        misaligned_lowp_gemm_count=shares.misaligned_lowp_gemms,
        misaligned_gemm_dims=shares.misaligned_dims,
        embedding_rows=shares.embedding_rows,
        dataloader_ms_per_step=steps.per_step(loading.total_us / 1000.0),
        comm_frac=trace_host.comm_time(ev, steps) / window if window > 0 else None,
        gpu=gpu,
        has_stacks=has_stacks,
        python_frames=len(ev.python),
        has_shapes=bool(ev.shapes),
        locations={topic: locs for topic, locs in locations.items() if locs},
        device_properties=ev.device_properties,
        notes=tuple(notes),
        comm=comm,
        timeline_facts=timeline_facts(ev, steps, gpu),
        compute=summarize_compute(ev, steps),
        compiled=compiled_regions(ev, steps),
    )
