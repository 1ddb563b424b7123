"""ORACLE: perfdoctor's GPU trace and memory facts side by side with the established tools.

    python benchmarks/oracle.py --compute     # HTA + tb_plugin + _memory_viz -> oracle_values.json
    python benchmarks/oracle.py               # perfdoctor on the same files, table vs the JSON
    python benchmarks/oracle.py --markdown    # the same table as Markdown (benchmarks/README.md)

--compute installs HolisticTraceAnalysis 0.5.0 and torch-tb-profiler 0.4.3, each in a venv
of its own under the cache dir (never project dependencies; neither needs torch), runs them
over every trace of the GPU corpus (`$PERFDOCTOR_GPU_CORPUS`, else `<repo>/../shared/gpu-corpus`)
and runs torch.cuda._memory_viz (this Python's torch, CPU) over every snapshot. It writes
benchmarks/oracle_values.json: per file, per tool, the tool's version and its metrics, and one
short definition per metric. Without --compute the script reads that JSON, runs perfdoctor's
analysis on every corpus file in a fresh subprocess (benchmarks/_oracle_pd.py) and prints, per
file and metric, the reference value, perfdoctor's value, the relative difference, and why they
differ where the definitions differ. tests/unit/analyze/test_oracle.py checks the same pairs.

MAPPING below is the one place that says which perfdoctor attribute answers which reference
metric; adjust it when perfdoctor's names change. It prints, it never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VALUES = HERE / "oracle_values.json"
DEFAULT_CACHE = Path.home() / ".cache" / "perfdoctor-bench"


# --------------------------------------------------------------------------- the mapping


@dataclass(frozen=True)
class Pair:
    """One reference metric and the perfdoctor value that answers it.

    tool: "hta" | "tb_plugin" | "memory"; oracle: key in that tool's metrics ("a.b" for a
    nested key, "top_kernels[0]" for the i-th kernel of a top list); ours: attribute path
    from perfdoctor's TraceSummary ("gpu.busy_frac") or MemorySummary, or "derived:NAME" (see
    DERIVED), or "" when perfdoctor has no counterpart (shown, never tested). kind: "share"
    and "bytes" (relative tolerance) or "count" (exact). test: False for a reference shown
    only for context because its definition differs on purpose; why says how.
    """

    tool: str
    oracle: str
    ours: str
    kind: str
    why: str = ""
    test: bool = True


TOLERANCE = {"share": 0.05, "bytes": 0.01, "count": 0.0}

# One row per pair, so the mapping reads as a table.
# fmt: off
MAPPING: tuple[Pair, ...] = (
    # --- HTA, arithmetic: perfdoctor's GPU analysis on HTA's own event selection (with two
    # or more ProfilerSteps only ops launched before the last step starts; _oracle_pd.hta_view)
    Pair("hta", "busy_frac", "hta_gpu.busy_frac", "share",
         "HTA: 1 - idle/window, window = first to last GPU op of HTA's selection"),
    Pair("hta", "idle_frac", "derived:hta_idle_frac", "share"),
    Pair("hta", "compute_frac", "hta_gpu.compute_frac", "share",
         "merged non-communication kernels / window"),
    Pair("hta", "non_compute_frac", "derived:hta_non_compute_frac", "share",
         "HTA non-compute = busy minus compute (comm, memcpy/memset not under compute)"),
    Pair("hta", "comm_frac", "hta_gpu.comm_frac", "share",
         "union of nccl*Kernel intervals / HTA window"),
    Pair("hta", "comm_overlap_frac", "hta_gpu.comm_overlap_frac", "share",
         "comm time under a compute kernel / comm time"),
    Pair("hta", "top_kernels[0]", "match:hta_gpu.top_kernels", "share",
         "share of kernel time (HTA: of COMPUTATION+COMMUNICATION kernel time)"),
    Pair("hta", "top_kernels[1]", "match:hta_gpu.top_kernels", "share"),
    Pair("hta", "top_kernels[2]", "match:hta_gpu.top_kernels", "share"),
    # --- HTA against perfdoctor's own definitions (context: they differ on purpose,
    # docs/gpu-metrics.md): every profiled step, and ops without a launch record are busy
    Pair("hta", "busy_frac", "gpu.busy_frac", "share",
         "perfdoctor keeps the last step and the ops HTA cannot link to a launch", test=False),
    Pair("hta", "comm_overlap_frac", "gpu.comm_overlap_frac", "share",
         "perfdoctor: every profiled step", test=False),
    Pair("hta", "kernels_per_iteration", "gpu.kernels_per_step", "share",
         "HTA: kernels launched in ProfilerSteps, last step dropped"),
    Pair("hta", "idle_host_wait_share", "derived:idle_host_wait_share", "share",
         "HTA splits each stream's gaps, summed over streams; perfdoctor the device's gaps, "
         "and a late launch that then waits is host wait only until the launch", test=False),
    Pair("hta", "idle_kernel_wait_share", "derived:idle_launch_gap_share", "share",
         "HTA kernel wait = queued gap < 30 us on a stream; perfdoctor <= 10 us on the device",
         test=False),
    Pair("hta", "idle_other_share", "derived:idle_dependency_wait_share", "share",
         "HTA other = queued gap >= 30 us on a stream (waits on events/streams)", test=False),
    Pair("hta", "kernel_us_median", "gpu.kernel_us_p50", "share",
         "HTA rounds float ts/dur to whole us (ceil start, floor end)", test=False),
    Pair("hta", "kernel_count", "gpu.kernel_count", "count",
         "HTA keeps only kernels whose launch is before the last ProfilerStep starts", test=False),
    Pair("hta", "launch_count", "gpu.launch_count", "count",
         "HTA counts cudaLaunchKernel(ExC) before the last ProfilerStep", test=False),
    # --- tb_plugin: the plugin's Overview and Kernel view of the file
    Pair("tb_plugin", "gpu_utilization", "gpu.busy_frac", "share",
         "tb: kernels only (no memcpy/memset) over the ProfilerStep span", test=False),
    Pair("tb_plugin", "sm_efficiency", "", "share",
         "perfdoctor has no SM efficiency"),
    Pair("tb_plugin", "occupancy_pct", "", "share",
         "perfdoctor has no occupancy"),
    Pair("tb_plugin", "tc_used_ratio", "gpu.tensor_core_kernel_frac", "share",
         "tb: names in its 2021 TC allowlist only (no sm80_xmma, cutlass tensorop)", test=False),
    Pair("tb_plugin", "steps", "steps", "count",
         "tb drops tail steps whose kernels it did not see"),
    Pair("tb_plugin", "step_us_avg", "derived:step_us_mean", "share",
         "tb: host ProfilerStep span, stretched to its kernels' end when runtime is seen"),
    Pair("tb_plugin", "dataloader_us_per_step", "tb_view.dataloader_us_per_step", "share",
         "tb: DataLoader spans inside steps less what Kernel > Memcpy > Memset > "
         "Communication > Runtime claimed first (perfdoctor's events, tb's priority)"),
    Pair("tb_plugin", "dataloader_us_per_step", "derived:dataloader_us_per_step", "share",
         "a different quantity: perfdoctor's data wait is the whole union of the DataLoader "
         "spans; tb's is what its priority order leaves of them", test=False),
    Pair("tb_plugin", "kernel_count", "gpu.kernel_count", "count",
         "tb: every kernel event in the file"),
    Pair("tb_plugin", "memcpy_count", "gpu.memcpy_count", "count",
         "tb: every memcpy event in the file"),
    Pair("tb_plugin", "memset_count", "gpu.memset_count", "count",
         "tb: every memset event in the file"),
    Pair("tb_plugin", "top_kernels[0]", "match:gpu.top_kernels", "share",
         "share of all kernel time in the file (memcpy/memset excluded)", test=False),
    Pair("tb_plugin", "comm_overlap_frac", "gpu.comm_overlap_frac", "share",
         "tb: comm includes host-side nccl:* ops; overlap with non-comm kernels", test=False),
    # --- torch.cuda._memory_viz (and MemoryViz.js's replay) on the snapshots
    Pair("memory", "segsum_total_reserved_bytes", "final_reserved_bytes", "bytes",
         "sum of segment total_size at the snapshot"),
    Pair("memory", "segsum_allocated_block_bytes", "final_allocated_bytes", "bytes",
         "live blocks at their block size (segsum prints requested size)"),
    Pair("memory", "device0_peak_allocated_bytes", "peak_allocated_bytes", "bytes",
         "MemoryViz.js replay: e.size of allocs, requested size of pre-history blocks"),
    Pair("memory", "device0_peak_reserved_bytes", "peak_reserved_bytes", "bytes",
         "MemoryViz.js segment replay"),
    Pair("memory", "top_sites_user[0]", "match:top_sites", "bytes",
         "innermost .py frame outside torch/site-packages, live at the snapshot end", test=False),
)
# fmt: on

# References that are an artefact of the tool on that file, not a definition to meet.
_TRITON_CPU_OP = "HTA takes the cpu_op triton_poi_* (it has a stream arg) for a GPU op"
_ROUNDING = (
    "HTA rounds float us timestamps to whole us (start up, end down): the 16 ops of this "
    "trace last a few us each, and HTA keeps 131 of their 149 us (same window, same ops)"
)
_CUDA_SYNC_ROWS = (
    "HTA counts the trace's cuda_sync rows (stream/event waits) as busy non-compute GPU ops"
)
# Pairs whose definitions agree in general but differ on this file on purpose
# (docs/gpu-metrics.md): shown as "on purpose" with the reason, not tested.
_UNLAUNCHED = (
    "tb_plugin counts every kernel/memcpy/memset event in the file; perfdoctor those "
    "launched in the profiled steps (614 ops of this CUDA-graph trace have no launch record)"
)
_GPU_STEP_COPY = (
    "tb_plugin counts the trace's gpu_user_annotation copy of ProfilerStep#1 as a third step "
    "(and averages over it); the trace has two ProfilerStep spans"
)
_DLRM_OUTSIDE = (
    "tb_plugin counts every kernel event in the file; perfdoctor those launched in the one "
    "profiled step (this rank's trace also holds the kernels of the step before it)"
)
_TRACELENS_H100 = "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"
_TRACELENS_GPU_STEP_COPY = (
    "tb_plugin counts the trace's gpu_user_annotation copy of ProfilerStep#6 as a second "
    "step (and averages over it); the trace has one ProfilerStep span"
)
_TRACELENS_OUTSIDE = (
    "tb_plugin counts every kernel/memset event in the file; perfdoctor those launched in "
    "the one profiled step"
)
ON_PURPOSE: dict[tuple[str, str, str], str] = {
    ("param_dlrm_worker1_step_12.1694128201556.pt.trace.json.gz", "tb_plugin", "kernel_count"): (
        _DLRM_OUTSIDE
    ),
    ("param_dlrm_worker3_step_12.1694128201557.pt.trace.json.gz", "tb_plugin", "kernel_count"): (
        _DLRM_OUTSIDE
    ),
    (_TRACELENS_H100, "tb_plugin", "steps"): _TRACELENS_GPU_STEP_COPY,
    (_TRACELENS_H100, "tb_plugin", "step_us_avg"): _TRACELENS_GPU_STEP_COPY,
    (_TRACELENS_H100, "tb_plugin", "kernel_count"): _TRACELENS_OUTSIDE,
    (_TRACELENS_H100, "tb_plugin", "memset_count"): _TRACELENS_OUTSIDE,
    ("hta_trace_diff_test_test.json.gz", "tb_plugin", "kernel_count"): _UNLAUNCHED,
    ("hta_trace_diff_test_test.json.gz", "tb_plugin", "memcpy_count"): _UNLAUNCHED,
    ("hta_trace_diff_test_test.json.gz", "tb_plugin", "memset_count"): _UNLAUNCHED,
    ("hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "tb_plugin", "steps"): (
        _GPU_STEP_COPY
    ),
    ("hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "tb_plugin", "step_us_avg"): (
        _GPU_STEP_COPY
    ),
}

EXCLUDED: dict[tuple[str, str, str], str] = {
    (
        "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "hta",
        "kernels_per_iteration",
    ): "HTA 0.5.0 assigns none of the 14 ROCm kernels it keeps to an iteration",
    # The trace has one ProfilerStep, so HTA keeps every event, and the Inductor cpu_op
    # 'triton_poi_*' carries a 'stream' arg: its temporal breakdown takes that CPU op
    # (96 us) for a GPU op (stream != -1) and the whole window comes out "busy".
    ("hta_triton_example_triton_example.json.gz", "hta", "busy_frac"): _TRITON_CPU_OP,
    **{
        ("hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "hta", metric): _ROUNDING
        for metric in (
            "busy_frac",
            "compute_frac",
            "non_compute_frac",
            "top_kernels[0]",
            "top_kernels[1]",
            "top_kernels[2]",
        )
    },
    # HTA takes every row with a stream arg for a GPU op, also the cuda_sync rows
    # ("Stream Wait Event", "Event Sync"), and classifies them as non-compute.
    (
        "hta_critical_path_cuda_event_sync_event_sync_trace.json.gz",
        "hta",
        "non_compute_frac",
    ): _CUDA_SYNC_ROWS,
    ("hta_critical_path_cuda_event_sync_event_sync_trace.json.gz", "hta", "busy_frac"): (
        _CUDA_SYNC_ROWS
    ),
    ("hta_triton_example_triton_example.json.gz", "hta", "idle_frac"): _TRITON_CPU_OP,
    # 16 back-to-back ops with float timestamps: HTA's rounded intervals (start up, end
    # down) open 27 us of gaps between them; rounding them so gives its 0.2143% exactly.
    ("tracelens_mi300_torch_compile_triton_trace.json.gz", "hta", "idle_frac"): (
        "HTA rounds float us timestamps to whole us (start up, end down): the gaps that "
        "opens between this trace's back-to-back ops are its whole idle time"
    ),
}

# The perfdoctor fields each derived value needs ("not yet" when one is missing).
DERIVED_NEEDS: dict[str, tuple[str, ...]] = {
    "idle_frac": ("gpu.busy_frac",),
    "hta_idle_frac": ("hta_gpu.busy_frac",),
    "hta_non_compute_frac": ("hta_gpu.busy_frac", "hta_gpu.compute_frac"),
    "idle_host_wait_share": (
        "gpu.idle_host_wait_frac",
        "gpu.idle_dependency_wait_frac",
        "gpu.idle_launch_gap_frac",
    ),
    "idle_launch_gap_share": (
        "gpu.idle_host_wait_frac",
        "gpu.idle_dependency_wait_frac",
        "gpu.idle_launch_gap_frac",
    ),
    "idle_dependency_wait_share": (
        "gpu.idle_host_wait_frac",
        "gpu.idle_dependency_wait_frac",
        "gpu.idle_launch_gap_frac",
    ),
    "step_us_mean": ("step_ms",),
    "dataloader_us_per_step": ("dataloader_ms_per_step",),
}


def needs(pair: Pair) -> tuple[str, ...]:
    """perfdoctor attribute paths a pair reads: "gpu.x" is GpuSummary.x, "x" TraceSummary.x
    (MemorySummary.x for the memory tool)."""
    if not pair.ours:
        return ()
    kind, _, name = pair.ours.partition(":")
    if kind == "derived":
        return DERIVED_NEEDS[name]
    if kind == "match":
        return (name,)
    return (pair.ours,)


def missing_fields(pair: Pair, fields: dict[str, list[str]]) -> list[str]:
    """The attributes of `needs(pair)` perfdoctor's dataclasses do not have (yet)."""
    gone = []
    for path in needs(pair):
        if path.startswith("tb_view."):
            continue  # the harness's own view of perfdoctor's events (_oracle_pd.tb_view)
        if path.startswith(("gpu.", "hta_gpu.")):
            cls, name = "GpuSummary", path.split(".", 1)[1]
        else:
            cls, name = ("MemorySummary" if pair.tool == "memory" else "TraceSummary"), path
        if name not in fields.get(cls, ()):
            gone.append(f"{cls}.{name}")
    return gone


def _gpu(ours: dict[str, Any], key: str, view: str = "gpu") -> Any:
    gpu = ours.get(view) or {}
    return gpu.get(key)


def _idle_share(ours: dict[str, Any], part: str) -> float | None:
    parts = [
        _gpu(ours, k)
        for k in ("idle_host_wait_frac", "idle_dependency_wait_frac", "idle_launch_gap_frac")
    ]
    if any(p is None for p in parts) or _gpu(ours, part) is None or not sum(parts):
        return None
    return _gpu(ours, part) / sum(parts)


def _hta_non_compute(o: dict[str, Any]) -> float | None:
    busy, compute = _gpu(o, "busy_frac", "hta_gpu"), _gpu(o, "compute_frac", "hta_gpu")
    return None if busy is None or compute is None else busy - compute


DERIVED = {
    "idle_frac": lambda o: None if _gpu(o, "busy_frac") is None else 1 - _gpu(o, "busy_frac"),
    "hta_idle_frac": lambda o: (
        None if _gpu(o, "busy_frac", "hta_gpu") is None else 1 - _gpu(o, "busy_frac", "hta_gpu")
    ),
    "hta_non_compute_frac": _hta_non_compute,
    "idle_host_wait_share": lambda o: _idle_share(o, "idle_host_wait_frac"),
    "idle_launch_gap_share": lambda o: _idle_share(o, "idle_launch_gap_frac"),
    "idle_dependency_wait_share": lambda o: _idle_share(o, "idle_dependency_wait_frac"),
    "step_us_mean": lambda o: (
        1000.0 * sum(o["step_ms"]) / len(o["step_ms"]) if o.get("step_ms") else None
    ),
    "dataloader_us_per_step": lambda o: (
        None if o.get("dataloader_ms_per_step") is None else 1000 * o["dataloader_ms_per_step"]
    ),
}

# What each reference metric means, stored beside the values (short, exact, with the source).
DEFINITIONS: dict[str, dict[str, str]] = {
    "hta": {
        "gpu_window_us": "temporal breakdown kernel_time: last end - first start of the merged "
        "GPU op intervals (stream != -1, after HTA's filter) of the rank "
        "(breakdown_analysis._get_idle_time_for_kernels)",
        "busy_frac": "1 - idle_time/kernel_time of get_temporal_breakdown",
        "idle_frac": "idle_time/kernel_time: window minus merged GPU op intervals",
        "compute_frac": "merged intervals of COMPUTATION kernels / window",
        "non_compute_frac": "window - idle - compute: GPU time with only non-compute ops "
        "(nccl kernels, memcpy, memset, *Sync*) running",
        "comm_frac": "merged time with a COMMUNICATION kernel (^nccl.*Kernel) running, alone or "
        "overlapped (_get_gpu_kernel_type_time labels) / window",
        "comm_overlap_frac": "get_comm_comp_overlap: time with both a comm and a compute kernel "
        "running / merged comm time",
        "idle_*_share": "get_idle_time_breakdown summed over all streams: per stream, the gap "
        "before each op is host_wait if its runtime call started after the previous op on the "
        "stream ended, else kernel_wait if the gap < 30 (us), else other",
        "compute_stream_idle_*": "the same for the stream with the most COMPUTATION kernel time",
        "top_kernels": "get_gpu_kernel_breakdown(duration_ratio=1, num_kernels=10): per kernel "
        "name, sum of durations; share = sum / sum over COMPUTATION+COMMUNICATION kernels",
        "kernel_type_time_share": "get_gpu_kernel_breakdown's kernel-type split for this rank: "
        "merged wall time per kernel type, overlaps as their own labels",
        "kernel_sum_share_*": "sum of kernel durations per type / all GPU op durations",
        "kernel_count": "GPU ops of cat kernel/Kernel in HTA's frame: kernels whose "
        "correlated CPU launch starts before the last ProfilerStep (all kernels when the "
        "trace has fewer than 2 ProfilerStep names)",
        "memcpy_count": "gpu_memcpy/Memcpy ops in HTA's frame",
        "memset_count": "gpu_memset/Memset ops in HTA's frame",
        "launch_count": "cudaLaunchKernel + cudaLaunchKernelExC CPU events in HTA's frame "
        "(the names its cuda_kernel_launch_stats uses)",
        "kernels_per_iteration": "kernels whose launch lies in a ProfilerStep (iteration >= 0) / "
        "number of iterations HTA keeps",
        "kernel_us_median": "median duration of those kernels (us, as HTA rounds them)",
        "launch_stats": "get_cuda_kernel_launch_stats: per launch/memcpy/memset correlation, "
        "cpu duration, gpu duration, launch delay = gpu start - cpu end (clipped at 0)",
    },
    "tb_plugin": {
        "gpu_utilization": "GPUMetricsParser.calculate_gpu_utilization: merged kernel intervals "
        "(Kernel events only) of the device within [first step start, last step end] / that span",
        "sm_efficiency": "Est. SM Efficiency: min(blocks per SM, 1) weighted by kernel time over "
        "the step span",
        "occupancy_pct": "Est. Achieved Occupancy: kernel-time-weighted mean of 'est. achieved "
        "occupancy %' within the step span",
        "gpu_window_us": "the step span used above: ProfilerStep spans, each stretched to the "
        "end of the device ops launched from it when runtime events are recognised",
        "steps": "ProfilerStep spans kept (tail steps with no or < 80% of the previous step's "
        "device ops are dropped)",
        "step_breakdown_us": "OverallParser: per step, time claimed in priority order Kernel > "
        "Memcpy > Memset > Communication > Runtime > DataLoader > CPU Exec > Other, averaged",
        "dataloader_us_per_step": "the DataLoader part of that breakdown",
        "kernel_count": "KernelParser: Kernel events in the file (all, not only in steps)",
        "top_kernels": "kernel view: per name, sum of durations; share = sum / all kernel time",
        "tc_used_ratio": "kernel time of kernels in the TC allowlist / all kernel time",
        "comm_overlap_frac": "sum over steps of overlap(non-comm kernels, communication) / "
        "communication, where communication = comm kernels + host nccl:/gloo: ops",
        "memcpy_count": "Memcpy events the plugin parsed",
        "memset_count": "Memset events",
        "runtime_count": "Runtime events the plugin parsed (0.4.3 knows the 2021 'Runtime' "
        "category only, not 'cuda_runtime')",
    },
    "memory": {
        "segsum_*": "`python -m torch.cuda._memory_viz stats` (segsum) at the snapshot: segments, "
        "total_reserved = sum total_size, total_allocated = sum requested size of active blocks",
        "segsum_allocated_block_bytes": "segsum total_allocated + its internal free = live "
        "blocks at their block size",
        "device0_peak_allocated_bytes": "_memory_viz.py has no peak; MemoryViz.js "
        "process_alloc_data replay (Active Memory Timeline), max total",
        "device0_peak_reserved_bytes": "the same with plot_segments (Active Cached Segment "
        "Timeline)",
        "top_sites_*": "the `memory` flamegraph's active blocks grouped by innermost .py frame "
        "(site_py) or innermost .py frame outside torch and site-packages (site_user)",
    },
}

HTA_PACKAGES = ("HolisticTraceAnalysis==0.5.0", "pandas<3")
TBP_PACKAGES = ("torch-tb-profiler==0.4.3", "pandas<3")
# Nothing in either venv needs torch; if a dependency ever asks for it, the small CPU build.
CONSTRAINTS = "torch==2.13.0\n"


# --------------------------------------------------------------------------- shared


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def corpus_dir() -> Path | None:
    env = os.environ.get("PERFDOCTOR_GPU_CORPUS")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "gpu-corpus"]:
        if (cand / "traces").is_dir():
            return cand
    return None


def corpus_traces(corpus: Path) -> list[Path]:
    return sorted(
        p
        for p in (corpus / "traces").iterdir()
        if p.name.endswith((".json", ".json.gz")) and "_expected" not in p.name
    )


def corpus_snapshots(corpus: Path) -> list[Path]:
    snaps = corpus / "snapshots"
    return sorted(snaps.glob("*.pickle")) if snaps.is_dir() else []


def last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def run_json(cmd: list[str], timeout_s: float, env: dict[str, str] | None = None) -> dict:
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    got = last_json(proc.stdout)
    if got is None:
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:200]}"}
    return got


# --------------------------------------------------------------------------- --compute


def ensure_venv(cache: Path, name: str, packages: tuple[str, ...]) -> Path | None:
    venv = cache / name
    python = venv / "bin" / "python"
    marker = venv / ".oracle-installed"
    if marker.exists() and marker.read_text() == "\n".join(packages):
        return python
    cache.mkdir(parents=True, exist_ok=True)
    constraints = cache / "constraints.txt"
    constraints.write_text(CONSTRAINTS)
    out(f"installing {' '.join(packages)} into {venv} (once)")
    steps = [] if python.exists() else [[sys.executable, "-m", "venv", str(venv)]]
    steps.append([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *packages])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            out(f"  install failed: {proc.stderr.strip()[-400:]}")
            return None
    marker.write_text("\n".join(packages))
    return python


def job_dirs(traces: list[Path], tmp: Path) -> list[Path]:
    """HTA wants a directory per job, one file per rank: `X_rank-N.json.gz` files of the same
    X share one (so per-rank values come out of one TraceAnalysis), every other file gets
    its own."""
    groups: dict[str, list[Path]] = {}
    for t in traces:
        got = re.match(r"(.*)_rank-\d+\.", t.name)
        groups.setdefault(got.group(1) if got else t.name, []).append(t)
    dirs = []
    for i, (_, files) in enumerate(sorted(groups.items())):
        d = tmp / f"job{i:02d}"
        d.mkdir()
        for f in files:
            (d / f.name).symlink_to(f)
        dirs.append(d)
    return dirs


def hta_derived(m: dict[str, Any]) -> None:
    """Metrics that are HTA's own numbers put on perfdoctor's scale (no new measurement)."""
    window = m.get("gpu_window_us")
    if window and m.get("comm_time_us") is not None:
        m["comm_frac"] = m["comm_time_us"] / window


def compute(cache: Path, timeout_s: float) -> int:
    corpus = corpus_dir()
    if corpus is None:
        out("no GPU corpus: set PERFDOCTOR_GPU_CORPUS or put it at <repo>/../shared/gpu-corpus")
        return 2
    traces, snapshots = corpus_traces(corpus), corpus_snapshots(corpus)
    result: dict[str, Any] = {
        "generated": time.strftime("%Y-%m-%d %H:%M"),
        "corpus": "gpu-corpus (see its README): traces/ and snapshots/",
        "tools": {},
        "definitions": DEFINITIONS,
        "traces": {t.name: {} for t in traces},
        "snapshots": {s.name: {} for s in snapshots},
    }
    hta_py = ensure_venv(cache, "hta-venv", HTA_PACKAGES)
    tbp_py = ensure_venv(cache, "tbp-venv", TBP_PACKAGES)

    if hta_py is not None:
        with tempfile.TemporaryDirectory() as tmp:
            for job in job_dirs(traces, Path(tmp)):
                files = sorted(p.name for p in job.iterdir())
                t0 = time.perf_counter()
                got = run_json([str(hta_py), str(HERE / "_oracle_hta.py"), str(job)], timeout_s)
                out(f"HTA {', '.join(files)}: {time.perf_counter() - t0:.1f} s")
                result["tools"]["hta"] = got.get("version", result["tools"].get("hta"))
                if "error" in got:
                    for f in files:
                        result["traces"][f]["hta"] = {"error": got["error"]}
                    out(f"  failed: {got['error']}")
                    continue
                for rank, r in got["ranks"].items():
                    hta_derived(r["metrics"])
                    result["traces"][r["file"]]["hta"] = {
                        "version": got["version"],
                        "rank": int(rank),
                        "job": files,
                        "metrics": r["metrics"],
                        "skipped": r["skipped"],
                    }
                    for what, why in r["skipped"].items():
                        out(f"  {r['file']}: {what} skipped: {why}")
    if tbp_py is not None:
        expected = corpus / "traces" / "tbplugin_gpu_metrics_expected.json"
        for t in traces:
            cmd = [str(tbp_py), str(HERE / "_oracle_tbp.py"), str(t)]
            if t.name == "tbplugin_gpu_metrics_input.json" and expected.exists():
                cmd.append(str(expected))
            t0 = time.perf_counter()
            got = run_json(cmd, timeout_s)
            out(f"tb_plugin {t.name}: {time.perf_counter() - t0:.1f} s")
            result["tools"]["tb_plugin"] = got.get("version", result["tools"].get("tb_plugin"))
            if "error" in got:
                out(f"  failed: {got['error']}")
            tbp_flatten(got)
            result["traces"][t.name]["tb_plugin"] = got
            if "expected_check" in got:
                out(f"  plugin's own expected GPU counters: {got['expected_check']}")
    for s in snapshots:
        t0 = time.perf_counter()
        got = run_json([sys.executable, str(HERE / "_oracle_mem.py"), str(s)], timeout_s)
        out(f"_memory_viz {s.name}: {time.perf_counter() - t0:.1f} s")
        result["tools"]["memory"] = got.get("version", result["tools"].get("memory"))
        if "error" in got:
            out(f"  failed: {got['error']}")
        result["snapshots"][s.name]["memory"] = got
    VALUES.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")  # stable diffs
    out(f"wrote {VALUES.relative_to(ROOT)} ({VALUES.stat().st_size / 1e3:.0f} kB)")
    return 0


def tbp_flatten(got: dict[str, Any]) -> None:
    """Per-device figures under device-free names, for the device with the most kernel time
    (the one perfdoctor summarises)."""
    m = got.get("metrics") or {}
    devices = m.get("devices") or []
    if not devices:
        return
    device = (
        devices[0]
        if len(devices) == 1
        else max(devices, key=lambda d: m.get(f"gpu{d}_utilization") or 0)
    )
    m["device"] = device
    for key in ("utilization", "sm_efficiency", "occupancy_pct", "tensor_core_ratio"):
        src = f"gpu{device}_{key}"
        m["gpu_utilization" if key == "utilization" else key] = m.get(src)


# --------------------------------------------------------------------------- comparison


def lookup(metrics: dict[str, Any], key: str) -> Any:
    got = re.fullmatch(r"(\w+)\[(\d+)\]", key)
    if got:
        items = metrics.get(got.group(1)) or []
        i = int(got.group(2))
        return items[i] if i < len(items) else None
    cur: Any = metrics
    for part in key.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def ours_value(ours: dict[str, Any], pair: Pair, ref: Any) -> Any:
    """perfdoctor's value for a pair; ours is the child's JSON of TraceSummary/MemorySummary."""
    if not pair.ours:
        return None
    if pair.ours.startswith("derived:"):
        return DERIVED[pair.ours.split(":", 1)[1]](ours)
    if pair.ours.startswith("match:"):
        items = lookup(ours, pair.ours.split(":", 1)[1]) or []
        if not isinstance(ref, dict):
            return None
        want = ref.get("name") or ref.get("site")
        for item in items if isinstance(items, list) else []:
            name = item.get("name") if isinstance(item, dict) else None
            if name is None and isinstance(item, dict) and isinstance(item.get("location"), dict):
                loc = item["location"]
                name = f"{loc.get('file')}:{loc.get('line')}:{loc.get('function')}"
            if name == want:
                return item.get("share") if pair.kind == "share" else item.get("bytes")
        return None
    return lookup(ours, pair.ours)


def ref_value(ref: Any, pair: Pair) -> Any:
    if isinstance(ref, dict):  # an item of a top list
        return ref.get("share") if pair.kind == "share" else ref.get("bytes")
    return ref


def label(pair: Pair, ref: Any) -> str:
    if isinstance(ref, dict):
        name = str(ref.get("name") or ref.get("site") or "?")
        return f"{pair.oracle} `{short(name)}`"
    return pair.oracle


def short(name: str, width: int = 40) -> str:
    name = re.sub(r"\(.*", "", name) if name.startswith("void ") else name
    return name if len(name) <= width else name[: width - 1] + "…"


def rel_diff(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return None
    if a == 0:
        return 0.0 if b == 0 else float("inf")
    return (b - a) / abs(a)


def fmt(v: Any, kind: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if kind == "bytes":
        return f"{v / 2**30:.3f} GiB"
    if kind == "count":
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


_ON_PURPOSE_MARK = "on purpose: "


def verdict(pair: Pair, ref: Any, ours: Any, gone: list[str], excluded: str | None) -> str:
    if not pair.ours:
        return "n/a"
    if gone:
        return "not yet"
    if excluded:
        return "on purpose" if excluded.startswith(_ON_PURPOSE_MARK) else "excluded"
    if ours is None:
        return "ok" if ref == 0 else "missing"  # none of it, said either way
    d = rel_diff(ref, ours)
    if d is None:
        return "-"
    if not pair.test:
        return "context"
    return "ok" if abs(d) <= TOLERANCE[pair.kind] + 1e-12 else "DIFF"


def rows_for(file: str, tools: dict[str, Any], ours: dict[str, Any]) -> list[dict[str, str]]:
    rows = []
    fields = ours.get("_fields") or {}
    for pair in MAPPING:
        entry = tools.get(pair.tool)
        if not entry or "metrics" not in entry:
            continue
        ref = lookup(entry["metrics"], pair.oracle)
        if ref is None:
            continue
        r, o = ref_value(ref, pair), ours_value(ours, pair, ref)
        d = rel_diff(r, o)
        key = (file, pair.tool, pair.oracle)
        excluded = EXCLUDED.get(key) or (
            _ON_PURPOSE_MARK + ON_PURPOSE[key] if key in ON_PURPOSE else None
        )
        rows.append(
            {
                "file": file,
                "tool": pair.tool,
                "metric": label(pair, ref),
                "reference": fmt(r, pair.kind),
                "perfdoctor": fmt(o, pair.kind),
                "diff": "-" if d is None else f"{d:+.1%}",
                "verdict": verdict(pair, r, o, missing_fields(pair, fields), excluded),
                "why": f"excluded: {excluded}" if excluded else pair.why,
                "key": f"{pair.tool} {pair.oracle}",
            }
        )
    return rows


def perfdoctor_on(path: Path, kind: str, timeout_s: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return run_json(
        [sys.executable, str(HERE / "_oracle_pd.py"), kind, str(path)], timeout_s, env=env
    )


def compare(markdown: bool, timeout_s: float) -> int:
    if not VALUES.exists():
        out(f"{VALUES.name} is missing: run with --compute first")
        return 2
    values = json.loads(VALUES.read_text())
    corpus = corpus_dir()
    if corpus is None:
        out("no GPU corpus: set PERFDOCTOR_GPU_CORPUS or put it at <repo>/../shared/gpu-corpus")
        return 2
    rows: list[dict[str, str]] = []
    errors: list[str] = []
    for kind, group in (("trace", "traces"), ("snapshot", "snapshots")):
        folder = corpus / group
        for name, tools in values[group].items():
            ours = perfdoctor_on(folder / name, kind, timeout_s)
            if "error" in ours:
                errors.append(f"{name}: perfdoctor: {ours['error']}")
            for tool, entry in tools.items():
                if isinstance(entry, dict) and "error" in entry:
                    errors.append(f"{name}: {tool}: {entry['error']}")
                for what, why in (entry.get("skipped") or {}).items():
                    if not why.startswith("no communication"):  # self-evident
                        errors.append(f"{name}: {tool} gives no {what}: {why}")
            rows.extend(rows_for(name, tools, ours))
    tools = ", ".join(f"{k} {v}" for k, v in values.get("tools", {}).items())
    out(
        f"references: {tools} (computed {values.get('generated')}); tolerance: shares "
        f"{TOLERANCE['share']:.0%} relative, bytes {TOLERANCE['bytes']:.0%}, counts exact"
    )
    cols = ["file", "tool", "metric", "reference", "perfdoctor", "diff", "verdict"]
    if markdown:
        # The why of each metric once, below the table, instead of on every row.
        out("| " + " | ".join(cols) + " |")
        out("|" + "---|" * len(cols))
        for r in rows:
            out("| " + " | ".join(r[c].replace("|", "\\|") for c in cols) + " |")
        out()
        for pair in MAPPING:
            if pair.why:
                out(f"- `{pair.tool} {pair.oracle}`: {pair.why}")
        for (file, tool, metric), why in EXCLUDED.items():
            out(f"- excluded, `{tool} {metric}` on {file}: {why}")
        for (file, tool, metric), why in ON_PURPOSE.items():
            out(f"- on purpose, `{tool} {metric}` on {file}: {why}")
    else:
        cols.append("why")
        widths = [
            min(max(len(r[c]) for r in [*rows, dict(zip(cols, cols, strict=True))]), 48)
            for c in cols
        ]
        out("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
        for r in rows:
            out("  ".join(r[c][:w].ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    out()
    out("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for e in errors:
        out(f"- {e}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compute", action="store_true", help="run the tools, write the JSON")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="the tools' venvs")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per file")
    args = parser.parse_args()
    if args.compute:
        return compute(args.cache, args.timeout)
    return compare(args.markdown, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
