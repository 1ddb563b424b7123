"""Per-step scalars for TensorBoard, one run per variant, next to that variant's traces.

The session directory is the TensorBoard logdir (docs/run-directory.md): `<session>/<label>/`
already holds the profiler trace the PyTorch Profiler plugin reads, and the event file
written here puts the variant's scalars in the same TensorBoard run, so baseline and
variants sit side by side in both the Scalars and the PyTorch Profiler tabs.

Written with tensorboard's own framework-free `tensorboard.summary.Writer` (numpy only):
this module runs offline (`perfdoctor report`) and must not import torch, so
torch.utils.tensorboard is out.

Axes: scalars from steps.jsonl use the step index as TensorBoard's step; device samples and
memory history use milliseconds since the script started (the tag description says so).
Wall times advance with the measured step times, so TensorBoard's "relative" axis reads as
time into the run.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from perfdoctor.model import Report

log = logging.getLogger(__name__)

EVENT_FILE_GLOB = "events.out.tfevents.*"
_MIB = 2**20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

# (series group, source key, tag, scale, description); x comes from the group's axis.
_STEP_TAGS = (
    ("wall_ms", "step/wall_ms", 1.0, "host wall time of each training step (ms); step = index"),
    (
        "step_ms",
        "step/step_ms",
        1.0,
        "time of each training step (ms), on the GPU's clock on CUDA runs; step = index",
    ),
    ("data_wait_ms", "step/data_wait_ms", 1.0, "time waiting for the DataLoader per step (ms)"),
    ("loss", "step/loss", 1.0, "loss captured at each step (same seed in every variant)"),
)
_SAMPLE_TAGS = (
    # Series hold utilization as fractions (0..1); TensorBoard shows percent.
    (
        "cpu_util",
        "util/cpu_percent",
        100.0,
        "CPU utilization, % of all cores; step = ms since start",
    ),
    ("gpu_util", "util/gpu_percent", 100.0, "NVML GPU utilization (%); step = ms since start"),
    ("power_w", "power/watts", 1.0, "board power (W); step = ms since start"),
    ("rss_bytes", "memory/rss_MiB", 1 / _MIB, "process RSS (MiB); step = ms since start"),
    (
        "mem_used_bytes",
        "memory/device_used_MiB",
        1 / _MIB,
        "device memory used, NVML (MiB); step = ms since start",
    ),
)
_MEMORY_TAGS = (
    (
        "allocated_bytes",
        "memory/allocated_MiB",
        1 / _MIB,
        "CUDA allocated memory from the allocator history (MiB); step = ms since start",
    ),
)


def write_scalars(session_dir: Path, report_or_series: Report | Mapping[str, Any]) -> list[Path]:
    """Write `<session>/<label>/events.out.tfevents.*` for every variant with data.

    Event files already in those directories are replaced (they are perfdoctor's own, per the
    run-directory contract), so re-rendering a session never shows a curve twice. Returns the
    event files written.
    """
    if isinstance(report_or_series, Report):
        series: Mapping[str, Any] = report_or_series.series or {}
        start = _epoch(report_or_series.created_at)
    else:
        series, start = report_or_series, None
    Writer = _writer_class()
    start = start if start is not None else datetime.now().timestamp()
    written: list[Path] = []
    for label in _labels(series):
        points = list(_points(series, label, start))
        if not points:
            continue
        run_dir = session_dir / _dir_name(label)
        if run_dir.is_symlink():
            # A run directory handed over may link elsewhere: nothing is written through it.
            log.warning("not writing TensorBoard scalars through the link %s", run_dir)
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        for old in run_dir.glob(EVENT_FILE_GLOB):
            old.unlink()
        writer = Writer(str(run_dir))
        described: set[str] = set()
        for tag, value, step, wall_time, description in points:
            writer.add_scalar(
                tag,
                value,
                step,
                wall_time=wall_time,
                description=None if tag in described else description,
            )
            described.add(tag)
        writer.close()
        written.extend(sorted(run_dir.glob(EVENT_FILE_GLOB)))
        log.debug("wrote %d scalars for %s", len(points), label)
    return written


# tensorboard's file layer probes for the S3 (botocore) and fsspec filesystems at import:
# about 0.17 s of CPU, three quarters of the import, for cloud paths a session never has.
_CLOUD_FILESYSTEMS = ("botocore", "fsspec")


def _writer_class() -> Any:
    """`tensorboard.summary.Writer`, imported with the cloud filesystems hidden.

    A None entry in sys.modules makes an import fail at once, which tensorboard takes as
    "not installed" (local paths only). The entries are removed afterwards, so the rest of
    the process imports those packages as usual; nothing is hidden when tensorboard or the
    packages were loaded before. (TensorBoard itself, `perfdoctor tensorboard`, runs in its
    own process with every filesystem.)"""
    hidden = (
        []
        if "tensorboard.summary" in sys.modules
        else [name for name in _CLOUD_FILESYSTEMS if name not in sys.modules]
    )
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        from tensorboard.summary import Writer
    finally:
        for name in hidden:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]
    return Writer


def _epoch(created_at: str) -> float | None:
    try:
        return datetime.fromisoformat(created_at).timestamp() if created_at else None
    except ValueError:
        return None


def _dir_name(label: str) -> str:
    """The variant's own directory; a label that is not one safe path part is made one."""
    if label not in (".", "..") and _UNSAFE.sub("", label) == label and label:
        return label
    return _UNSAFE.sub("_", label).strip("._") or "variant"


def _labels(series: Mapping[str, Any]) -> list[str]:
    labels: list[str] = []
    for group in ("steps", "samples", "memory"):
        rows = series.get(group)
        if isinstance(rows, Mapping):
            labels += [str(k) for k in rows if str(k) not in labels]
    return labels


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _row(series: Mapping[str, Any], group: str, label: str) -> Mapping[str, Any]:
    rows = series.get(group)
    row = rows.get(label) if isinstance(rows, Mapping) else None
    return row if isinstance(row, Mapping) else {}


def _column(row: Mapping[str, Any], key: str) -> Sequence[Any]:
    values = row.get(key)
    return values if isinstance(values, Sequence) and not isinstance(values, str) else ()


_Point = tuple[str, float, int, float, str]  # tag, value, step, wall time, description


def _points(series: Mapping[str, Any], label: str, start: float) -> Iterator[_Point]:
    """Every finite value of one variant, as a TensorBoard scalar point."""
    steps = _row(series, "steps", label)
    index = _column(steps, "index")
    wall_ms = _column(steps, "wall_ms")
    # Wall time of each step's end: the run's start plus the step times so far.
    ends, elapsed = [], 0.0
    for ms in wall_ms:
        elapsed += float(ms) if _finite(ms) else 0.0
        ends.append(start + elapsed / 1000)
    for key, tag, scale, description in _STEP_TAGS:
        if key == "step_ms" and list(_column(steps, key)) == list(wall_ms):
            continue  # no device clock (CPU run): the same numbers as step/wall_ms
        for i, (step, value) in enumerate(zip(index, _column(steps, key), strict=False)):
            if _finite(step) and _finite(value):
                wall = ends[i] if i < len(ends) else start
                yield tag, float(value) * scale, int(step), wall, description
    for group, time_key, tags in (("samples", "t", _SAMPLE_TAGS), ("memory", "t_s", _MEMORY_TAGS)):
        row = _row(series, group, label)
        times = _column(row, time_key)
        for key, tag, scale, description in tags:
            for t, value in zip(times, _column(row, key), strict=False):
                if _finite(t) and _finite(value):
                    yield tag, float(value) * scale, round(float(t) * 1000), start + t, description
