"""The GPU timeline section of the reports, worded once: where the GPU's time went (busy,
and what the idle time waited for), communication and its overlap, and the kernels that take
the time. Shown when the trace had GPU activity; the figures come from the trace analysis
(analyze/trace_gpu.py) through `Report.facts` and `Report.gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.model import Report
from perfdoctor.render import format as fmt
from perfdoctor.render.gpu_step import gpu_step_text

DEFINITIONS = (
    "Measured on the GPU's own timeline over every profiled step; HTA drops the last step "
    "and ops it cannot link to a launch, tb_plugin counts kernels only over the host's steps "
    "(docs/gpu-metrics.md in perfdoctor's repository)."
)

# (fact, label, what it means): the idle rows add up with busy to the window.
_TIMELINE = (
    ("gpu_busy_frac", "busy", "a kernel, copy or memset running on any stream"),
    ("gpu_idle_host_busy_frac", "idle: host busy", "nothing queued; the host in Python/launches"),
    ("gpu_idle_host_data_frac", "idle: input data", "nothing queued; the host in the DataLoader"),
    ("gpu_idle_alloc_frac", "idle: malloc/free", "the host in cudaMalloc/cudaFree (a free syncs)"),
    ("gpu_idle_host_sync_frac", "idle: after a sync", "blocked in a sync that drained the queue"),
    (
        "gpu_idle_host_unrecorded_frac",
        "idle: host unrecorded",
        "nothing queued; no host work recorded (trace tail, gaps)",
    ),
    ("gpu_idle_launch_gap_frac", "idle: launch gaps", "dispatch gaps before queued kernels"),
    ("gpu_idle_dependency_wait_frac", "idle: dependencies", "queued work waiting (events, peers)"),
)
_COMM = (
    ("gpu_compute_frac", "compute kernels", "non-communication kernels running"),
    ("gpu_comm_frac", "communication kernels", "collective kernels running"),
    ("gpu_comm_exposed_frac", "exposed communication", "collectives with no compute beside"),
)


@dataclass(frozen=True)
class Row:
    label: str
    value: str
    note: str


@dataclass(frozen=True)
class KernelRow:
    name: str
    count: str
    total_ms: str
    share: str
    kind: str


def has_gpu_view(report: Report) -> bool:
    return report.facts.get("gpu_busy_frac") is not None


def window_text(report: Report) -> str:
    gpu = report.gpu
    parts = []
    if isinstance(gpu.get("window_ms"), (int, float)):
        parts.append(f"GPU window {fmt.ms(float(gpu['window_ms']))}")
    if isinstance(gpu.get("window_basis"), str):
        parts.append(str(gpu["window_basis"]))
    tail = report.facts.get("gpu_tail_ms")
    if isinstance(tail, (int, float)) and tail > 0:
        parts.append(f"the GPU ran {fmt.ms(float(tail))} past the host's last profiled step")
    parts.append(gpu_step_text(report))
    return "; ".join(p for p in parts if p)


def timeline_rows(report: Report) -> list[Row]:
    rows = []
    for fact, label, note in _TIMELINE:
        value = report.facts.get(fact)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append(Row(label, fmt.percent(float(value)), note))
    return rows


def comm_rows(report: Report) -> list[Row]:
    if not report.facts.get("gpu_comm_frac"):
        return []
    rows = []
    for fact, label, note in _COMM:
        value = report.facts.get(fact)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append(Row(label, fmt.percent(float(value)), note))
    overlap = report.facts.get("gpu_comm_overlap_frac")
    if isinstance(overlap, (int, float)) and not isinstance(overlap, bool):
        rows.append(
            Row("overlapped", fmt.percent(float(overlap)), "of communication under compute")
        )
    return rows


COLLECTIVE_COLUMNS = ("collective", "count", "time", "share", "message", "bus bandwidth", "time is")
COLLECTIVE_NOTE = (
    "Bus bandwidth is nccl-tests' busbw (the message over the kernel's time, times the "
    "collective's ring factor), comparable with one GPU's link; \"waiting\": the kernel's "
    "time does not follow its message size, or its bandwidth is far below the link, so most "
    "of it waits for a peer rank and a faster network would not return it."
)


def _gbs(value: object) -> str:
    return f"{float(value):,.1f} GB/s" if isinstance(value, (int, float)) else "—"


def collective_rows(report: Report) -> list[list[str]]:
    """One row per collective type of the trace (COLLECTIVE_COLUMNS), most time first."""
    rows = []
    for c in report.gpu.get("collectives") or []:
        if not isinstance(c, dict):
            continue
        size = c.get("bytes_mean")
        message = f"{fmt.nbytes(size)} mean" if isinstance(size, (int, float)) else "not recorded"
        bandwidth = _gbs(c.get("busbw_gbs_p50"))
        link_frac = c.get("link_frac")
        if isinstance(link_frac, (int, float)) and c.get("link"):
            bandwidth += f" ({fmt.percent(float(link_frac))} of {c['link']})"
        rows.append(
            [
                str(c.get("kind", "")).replace("_", "-"),
                f"{int(c.get('count', 0)):,}",
                fmt.ms(float(c.get("ms_total", 0.0))),
                fmt.percent(float(c.get("share", 0.0))),
                message,
                bandwidth,
                str(c.get("verdict") or "unknown"),
            ]
        )
    return rows


def count_text(report: Report) -> str:
    gpu = report.gpu
    words = []
    for key, label in (
        ("kernel_count", "kernels"),
        ("launch_count", "launch calls"),
        ("memcpy_count", "copies"),
        ("memset_count", "memsets"),
        ("streams", "streams"),
    ):
        value = gpu.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            words.append(f"{value:,} {label}")
    unlaunched = gpu.get("unlaunched_count")
    if isinstance(unlaunched, int) and unlaunched > 0:
        words.append(f"{unlaunched:,} ops with no launch record in the trace (counted as busy)")
    return ", ".join(words)


def kernel_rows(report: Report) -> list[KernelRow]:
    rows = []
    for k in report.gpu.get("top_kernels") or []:
        if not isinstance(k, dict):
            continue
        kind = "comm" if k.get("comm") else ("tensor cores" if k.get("tensor_core") else "")
        rows.append(
            KernelRow(
                name=fmt.one_line(str(k.get("name", "")), 90),
                count=f"{int(k.get('count', 0)):,}",
                total_ms=fmt.ms(float(k.get("ms_total", 0.0))),
                share=fmt.percent(float(k.get("share", 0.0))),
                kind=kind,
            )
        )
    return rows
