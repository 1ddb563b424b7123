"""samples.jsonl (the parent's NVML / psutil sampler) -> means over the timed window.

Rows are run_schema's sample structs (CpuSample, GpuSample, NoteSample, ...; their fields are
tabled in docs/run-directory.md). `t` is seconds since the child started, the same clock as
progress.jsonl, whose rows (run_schema.ProgressRow) give the timed window.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfdoctor.run_schema import CpuSample, GpuSample, NoteSample, ProgressRow, SampleRow

# nvmlClocksEventReasons bits that mean the GPU was slowed down (shared/mechanics.md 5):
# SwPowerCap 0x4, HwSlowdown 0x8, SwThermal 0x20, HwThermal 0x40, HwPowerBrake 0x80.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class SamplesSummary:
    window_s: tuple[float, float] | None  # the timed window, None: every sample was used
    gpu_samples: int
    cpu_samples: int
    gpu_util_mean_frac: float | None
    gpu_power_w_mean: float | None
    energy_j_per_step: float | None
    gpu_throttled_frac: float | None
    sm_active_frac: float | None
    tensor_active_frac: float | None
    gpu_mem_used_bytes_max: int | None
    cpu_util_mean_frac: float | None
    cpu_busy_cores: float | None
    # Cores the run's own processes kept busy: the child and every process under it (workers,
    # ranks, a launcher agent), and the other ranks where the rows list them apart.
    child_cpu_cores: float | None
    rss_bytes_max: int | None
    # Cores kept busy by processes outside the run (the machine's busy cores minus the child
    # and its workers): other jobs on a shared machine, which skew every timing.
    other_busy_cores: float | None = None
    cpu_cores: int | None = None
    notes: tuple[str, ...] = ()


def timed_window(progress: Iterable[ProgressRow]) -> tuple[tuple[float, float] | None, int]:
    """(start, end) in seconds of the timed steps, and how many steps it holds.

    A progress row is written when a step ends, so the window opens when the last warm-up
    step ended and closes when the last timed step did.
    """
    warm_end: float | None = None
    timed: list[float] = []
    for row in progress:
        t = float(row.t)
        if row.phase == "warmup":
            warm_end = t if warm_end is None else max(warm_end, t)
        elif row.phase == "timed":
            timed.append(t)
    if len(timed) < 1:
        return None, 0
    start = warm_end if warm_end is not None else min(timed)
    # Without a warm-up row the first timed step's own duration is not in the window.
    count = len(timed) if warm_end is not None else len(timed) - 1
    if count < 1 or max(timed) <= start:
        return None, 0
    return (start, max(timed)), count


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _percent_frac(percents: Sequence[float]) -> float | None:
    """The mean of percentages, as a fraction (None without a sample)."""
    mean = _mean(percents)
    return None if mean is None else mean / 100.0


def _finite(rows: Sequence[Any], key: str) -> list[float]:
    """The finite values of one numeric field over sample rows."""
    values = (getattr(r, key) for r in rows)
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]


def summarize_samples(
    rows: Iterable[SampleRow],
    window: tuple[float, float] | None,
    steps_in_window: int,
) -> SamplesSummary:
    cpu: list[CpuSample] = []
    inside: list[GpuSample] = []
    outside: list[GpuSample] = []  # GPU rows just outside still anchor the energy interpolation
    notes: list[str] = []
    for row in rows:
        if isinstance(row, NoteSample):
            if row.message:
                notes.append(row.message)
            continue
        if window is not None and not (window[0] <= row.t <= window[1]):
            if isinstance(row, GpuSample):
                outside.append(row)
            continue
        if isinstance(row, CpuSample):
            cpu.append(row)
        elif isinstance(row, GpuSample):
            inside.append(row)

    util = _finite(inside, "util_gpu")
    throttle = [int(r.throttle_reasons) for r in inside if isinstance(r.throttle_reasons, int)]
    mem_used = _finite(inside, "mem_used_bytes")
    per_core = [r.cpu_percent for r in cpu if r.cpu_percent is not None]
    core_sums = [float(sum(c)) / 100.0 for c in per_core if c]
    core_means = [float(np.mean(c)) / 100.0 for c in per_core if c]
    rss = _finite(cpu, "rss_bytes")
    ours = [x for x in (_run_percent(r) for r in cpu) if x is not None and math.isfinite(x)]
    others = [_other_cores(r) for r in cpu]
    others_known = [x for x in others if x is not None]
    return SamplesSummary(
        window_s=window,
        gpu_samples=len(inside),
        cpu_samples=len(cpu),
        gpu_util_mean_frac=_percent_frac(util),
        gpu_power_w_mean=_power_mean(inside),
        energy_j_per_step=_energy_per_step(inside + outside, window, steps_in_window),
        gpu_throttled_frac=(sum(1 for x in throttle if x & THROTTLE_MASK) / len(throttle))
        if throttle
        else None,
        sm_active_frac=_mean(_finite(inside, "gpm_sm_active")),
        tensor_active_frac=_mean(_finite(inside, "gpm_tensor_active")),
        gpu_mem_used_bytes_max=int(max(mem_used)) if mem_used else None,
        cpu_util_mean_frac=_mean(core_means),
        cpu_busy_cores=_mean(core_sums),
        child_cpu_cores=_percent_frac(ours),
        rss_bytes_max=int(max(rss)) if rss else None,
        other_busy_cores=_mean(others_known),
        cpu_cores=max((len(c) for c in per_core), default=0) or None,
        notes=tuple(dict.fromkeys(notes)),
    )


def _run_percent(row: CpuSample) -> float | None:
    """CPU percent of the whole process tree perfdoctor started, in one CPU row: the child
    and its descendants (DataLoader workers; under torchrun the child is the launcher agent
    and the ranks are its descendants) and the other ranks of a run that lists them apart
    (`ranks_cpu_percent`), and perfdoctor's own sampling process (`perfdoctor_cpu_percent`).
    None without a reading of the child."""
    if row.child_cpu_percent is None:
        return None
    ours = float(row.child_cpu_percent)
    for value in (row.workers_cpu_percent, row.ranks_cpu_percent, row.perfdoctor_cpu_percent):
        ours += float(value) if value is not None else 0.0
    return ours


def _other_cores(row: CpuSample) -> float | None:
    """Cores busy outside the run in one CPU row (clipped at 0: the child's and the machine's
    counters are read a moment apart, so their difference can dip below zero)."""
    cores, ours = row.cpu_percent, _run_percent(row)
    if not cores or ours is None:
        return None
    busy = float(sum(x for x in cores if isinstance(x, (int, float))))
    return max(0.0, busy - ours) / 100.0


def _power_mean(rows: list[GpuSample]) -> float | None:
    """Mean board power of all sampled GPUs together (sum over devices, mean over time)."""
    by_t: dict[float, float] = defaultdict(float)
    for r in rows:
        if r.power_w is not None:
            by_t[float(r.t)] += float(r.power_w)
    return _mean(list(by_t.values()))


def _energy_per_step(
    rows: list[GpuSample], window: tuple[float, float] | None, steps: int
) -> float | None:
    """Energy-counter delta across the window / steps in it, summed over devices.

    The counter (mJ, monotonic) is interpolated at the window's edges, so sampling phase
    does not bias short windows.
    """
    if window is None or steps < 1:
        return None
    by_device: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r.energy_mj is not None:
            by_device[r.index].append((float(r.t), float(r.energy_mj)))
    total_mj = 0.0
    for points in by_device.values():
        points.sort()
        t = np.array([p[0] for p in points])
        e = np.array([p[1] for p in points])
        if t.size < 2 or t[0] > window[0] or t[-1] < window[1]:
            # The counter must be seen on both sides of the window to be interpolated.
            inner = [(ti, ei) for ti, ei in points if window[0] <= ti <= window[1]]
            if len(inner) < 2:
                continue
            total_mj += (inner[-1][1] - inner[0][1]) * (
                (window[1] - window[0]) / max(inner[-1][0] - inner[0][0], 1e-9)
            )
            continue
        total_mj += float(np.interp(window[1], t, e) - np.interp(window[0], t, e))
    if total_mj <= 0:
        return None
    return total_mj / 1000.0 / steps
