"""Chart data of one run (step times, phase breakdown, device samples, memory): what the
report's charts draw, kept apart from the facts the rules read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from perfdoctor.analyze.compile_facts import compile_series
from perfdoctor.analyze.memory import memory_series
from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.run_stats import breakdown_ms, finite_numbers
from perfdoctor.run_schema import CpuSample, GpuSample, SampleRow


def series_for(record: RunRecord) -> dict[str, Any]:
    """Chart data of one run; the pipeline files each part under the run's label:
    {"steps": {...}, "breakdown_ms": {...}, "samples": {...}, "memory": {...}} (the shape of
    Report.series in model.py, one level down)."""
    return {
        "steps": {
            "index": [s.index for s in record.steps],
            "wall_ms": [s.wall_ms for s in record.steps],
            "step_ms": [s.step_ms for s in record.steps],
            "loss": [s.loss for s in record.steps],
            "data_wait_ms": [s.data_wait_ms for s in record.steps],
            "phase": [s.phase for s in record.steps],
        },
        "breakdown_ms": breakdown_ms(record.timed_steps),
        "samples": _sample_series(record.samples),
        "memory": _memory_series(record),
        "compile": compile_series(record),
    }


def _sample_series(rows: Sequence[SampleRow]) -> dict[str, list[Any]]:
    """CPU and GPU rows merged on their timestamps (GPU values: mean util, summed power and
    memory over the sampled devices)."""
    by_t: dict[float, dict[str, Any]] = {}
    for row in rows:
        if not isinstance(row, (CpuSample, GpuSample)):
            continue
        slot = by_t.setdefault(round(float(row.t), 3), {"util": [], "power": [], "mem": []})
        if isinstance(row, CpuSample):
            cores = row.cpu_percent
            if cores:
                slot["cpu_util"] = float(np.mean(finite_numbers(cores))) / 100.0
                # The run's own share (training process, its workers, the other ranks) of all
                # cores: on a shared machine the machine-wide line says more about the
                # neighbours.
                own = finite_numbers(
                    [row.child_cpu_percent, row.workers_cpu_percent, row.ranks_cpu_percent]
                )
                if own:
                    slot["run_cpu_util"] = min(1.0, sum(own) / 100.0 / len(cores))
            if isinstance(row.rss_bytes, int):
                slot["rss_bytes"] = row.rss_bytes
        else:
            if row.util_gpu is not None:
                slot["util"].append(float(row.util_gpu) / 100.0)
            if row.power_w is not None:
                slot["power"].append(float(row.power_w))
            if row.mem_used_bytes is not None:
                slot["mem"].append(int(row.mem_used_bytes))
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "t",
            "cpu_util",
            "run_cpu_util",
            "gpu_util",
            "power_w",
            "mem_used_bytes",
            "rss_bytes",
        )
    }
    for t in sorted(by_t):
        slot = by_t[t]
        out["t"].append(t)
        out["cpu_util"].append(slot.get("cpu_util"))
        out["run_cpu_util"].append(slot.get("run_cpu_util"))
        out["gpu_util"].append(float(np.mean(slot["util"])) if slot["util"] else None)
        out["power_w"].append(float(sum(slot["power"])) if slot["power"] else None)
        out["mem_used_bytes"].append(int(sum(slot["mem"])) if slot["mem"] else None)
        out["rss_bytes"].append(slot.get("rss_bytes"))
    return out


def _memory_series(record: RunRecord) -> dict[str, Any]:
    return memory_series(record.memory)
