"""Batch planning's arithmetic (pure: no torch): the memory model, where it runs out, which
batch sizes to measure, and which batch is fastest within memory.

Memory model: peak(b) = fixed + per_sample * b, fitted by least squares over the runs at
two or three batch sizes. `fixed` holds the parameters, gradients, optimizer state, the
framework and the data the process keeps; `per_sample` the activations and the batch
itself, which scale with the batch. On CUDA the peak is torch's max reserved (what the
caching allocator asked the driver for: the figure an OOM is about), on a CPU the process
RSS high-water mark over the training steps (collect/appliers/batch.py reads it).

Limits: CUDA, the device's total memory less CUDA_MARGIN_FRAC (the context, cuBLAS
workspaces and other processes live outside torch's reserved figure); CPU, the memory the
user gives (--memory-limit), else the RAM available when the plan began less
CPU_MARGIN_FRAC (the page cache and other jobs move it while the plan runs).

Throughput is samples per second, never step time: a larger batch has longer steps and
may still train faster.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Device memory kept free on CUDA: the context and library workspaces are not in torch's
# reserved figure (about 300-600 MiB on an H100 with cuBLAS and cuDNN loaded).
CUDA_MARGIN_FRAC = 0.05
# RAM kept free on a CPU: MemAvailable moves with the page cache and the machine's other jobs.
CPU_MARGIN_FRAC = 0.10
# The batch sizes measured for the fit, as multiples of the script's own batch.
MEASURE_FACTORS = (0.5, 1.0, 2.0)
# The check of the prediction runs at the predicted limit when that is at most this many
# times the script's batch, else at this multiple (an unmeasured size: the "within 15%"
# check of issue 23), so a machine with plenty of RAM is not asked for a huge batch.
VERIFY_MAX_FACTOR = 4.0
# A prediction within this share of the measured peak is confirmed (issue 23's bar).
PREDICTION_TOLERANCE = 0.15
# A larger batch is only worth its recipe change when the measured samples/s beat the
# script's own batch by more than this (single runs on a busy machine scatter ~5-10%);
# the paired A/B confirmation then decides.
MIN_GAIN_FRAC = 0.05


@dataclass(frozen=True)
class MemoryPoint:
    batch: int
    peak_bytes: int


@dataclass(frozen=True)
class MemoryFit:
    fixed_bytes: float
    per_sample_bytes: float
    points: int
    # Largest |measured - fitted| / measured over the points: how straight the line is.
    worst_residual_frac: float

    def predict(self, batch: int) -> float:
        return self.fixed_bytes + self.per_sample_bytes * batch


def fit_memory(points: Sequence[MemoryPoint]) -> MemoryFit | None:
    """Least-squares line through (batch, peak); None without two distinct batch sizes.
    A negative slope (noise on a model whose activations are tiny next to the process)
    is clamped to 0: memory does not fall as the batch grows."""
    usable = [p for p in points if p.batch > 0 and p.peak_bytes > 0]
    xs = [float(p.batch) for p in usable]
    if len(set(xs)) < 2:
        return None
    ys = [float(p.peak_bytes) for p in usable]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    slope = max(0.0, slope)
    fixed = my - slope * mx
    worst = max(abs(y - (fixed + slope * x)) / y for x, y in zip(xs, ys, strict=True))
    return MemoryFit(fixed, slope, n, worst)


def memory_limit_bytes(
    *,
    on_cuda: bool,
    device_total: int | None,
    available: int | None,
    user_limit: int | None,
) -> tuple[int | None, str]:
    """The peak a run may reach, and where that figure comes from (one phrase)."""
    if user_limit is not None:
        return user_limit, "--memory-limit"
    if on_cuda:
        if device_total is None:
            return None, "the device's memory was not observed"
        return (
            int(device_total * (1 - CUDA_MARGIN_FRAC)),
            f"device memory less {CUDA_MARGIN_FRAC:.0%}",
        )
    if available is None:
        return None, "the available RAM was not readable"
    return int(available * (1 - CPU_MARGIN_FRAC)), f"available RAM less {CPU_MARGIN_FRAC:.0%}"


def max_batch(fit: MemoryFit, limit: int) -> int | None:
    """The largest batch whose predicted peak stays within `limit`; None when even the
    fixed part does not fit or the peak does not grow with the batch (no limit from it)."""
    if fit.fixed_bytes >= limit:
        return 0
    if fit.per_sample_bytes <= 0:
        return None
    return math.floor((limit - fit.fixed_bytes) / fit.per_sample_bytes)


def measurement_batches(script_batch: int) -> tuple[int, ...]:
    """The batch sizes the fit is measured at: half, the script's own, double."""
    sizes = {max(1, round(script_batch * f)) for f in MEASURE_FACTORS}
    return tuple(sorted(sizes))


def verification_batch(
    script_batch: int, measured: Sequence[int], limit_batch: int | None
) -> tuple[int, str] | None:
    """The batch that checks the prediction, and why that one: the predicted limit when it
    is near (a run there must fit), else an unmeasured multiple of the script's batch."""
    cap = max(1, round(script_batch * VERIFY_MAX_FACTOR))
    if limit_batch is not None and 0 < limit_batch <= cap:
        if limit_batch not in measured:
            return limit_batch, "at the predicted limit"
        below = limit_batch - 1
        return (below, "just below the predicted limit") if below > 0 else None
    if limit_batch == 0:
        return None
    candidate = cap
    while candidate in measured and candidate > 1:
        candidate -= 1
    return (candidate, "a batch not measured for the fit") if candidate not in measured else None


@dataclass(frozen=True)
class CurvePoint:
    batch: int
    samples_s: float | None
    peak_bytes: int | None
    predicted_bytes: float | None = None
    ok: bool = True  # the run ended normally (False: crashed, e.g. out of memory)


def fastest_within(
    curve: Sequence[CurvePoint],
    limit: int | None,
    script_batch: int,
    *,
    keep_effective: int | None = None,
) -> CurvePoint | None:
    """The point of highest samples/s whose peak is within `limit`; the script's own batch
    unless another beats it by MIN_GAIN_FRAC. `keep_effective`: only batches that divide
    it (gradient accumulation then keeps the effective batch)."""
    fits = [
        p
        for p in curve
        if p.ok
        and p.samples_s
        and (limit is None or (p.peak_bytes is not None and p.peak_bytes <= limit))
        and (keep_effective is None or accumulation_steps(keep_effective, p.batch) is not None)
    ]
    if not fits:
        return None
    best = max(fits, key=lambda p: p.samples_s or 0.0)
    own = next((p for p in fits if p.batch == script_batch), None)
    gain = (best.samples_s or 0.0) / own.samples_s if own is not None and own.samples_s else None
    if own is not None and gain is not None and gain < 1 + MIN_GAIN_FRAC:
        return own
    return best


def prediction_error(predicted: float, measured: int) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured


def accumulation_steps(effective: int, micro: int) -> int | None:
    """Micro-batches per optimizer step that keep `effective`; None when `micro` does not
    divide it."""
    if micro <= 0 or effective % micro:
        return None
    return effective // micro


# The per-sample part must reach this share of the peak at the largest measured batch for
# a check within PREDICTION_TOLERANCE to say something about it: below it the fixed part
# alone would pass (tabular_mlp_debug.py: 3% at batch 1024, benchmarks/README.md).
MIN_PER_SAMPLE_SHARE = 0.15
# glibc's largest dynamic mmap threshold on 64-bit Linux (DEFAULT_MMAP_THRESHOLD_MAX,
# 4 MiB x sizeof(long)): allocations above it are mapped and returned to the system when
# freed; below it, after a first such free, they come from the heap, whose freed chunks stay
# resident. The process RSS is not linear in the batch across it (benchmarks/README.md,
# word_language_model: with the threshold pinned by MALLOC_MMAP_THRESHOLD_ it is).
GLIBC_MMAP_THRESHOLD_MAX = 32 * 2**20

Confidence = Literal["confirmed", "weak", "unreliable", "unchecked"]


def prediction_confidence(
    points: Sequence[MemoryPoint],
    fit: MemoryFit,
    verify_batch: int | None,
    verify_error: float | None,
    *,
    rss: bool,
    recheck: tuple[int | None, float | None] = (None, None),
) -> tuple[Confidence, str]:
    """How far the memory prediction can be trusted, and why (one sentence):
    - confirmed: a run at a batch the fit did not measure landed within the tolerance, and
      the per-sample part is large enough for that to mean something;
    - weak: within the tolerance, but the per-sample part is small beside the process (the
      fixed part alone would pass), or the fit saw no growth with the batch;
    - unreliable: the check missed the tolerance; the reason says which way, and on a CPU
      names the allocator's mmap threshold when the peak grew less than linearly;
    - unchecked: no run checked it.
    `recheck`: the batch and error of the refitted model's own check, after a miss: within
    the tolerance it confirms the refit, and the reason says so after the miss's."""
    if verify_batch is None or verify_error is None:
        return "unchecked", "no run at a batch the fit did not measure checked the prediction"
    measured = sorted(points, key=lambda p: p.batch)
    at_check = f"at batch {verify_batch} the prediction was off by {verify_error:+.1%}"
    if abs(verify_error) > PREDICTION_TOLERANCE:
        falls = [
            (a.batch, b.batch)
            for a, b in itertools.pairwise(measured)
            if b.peak_bytes < a.peak_bytes
        ]
        fell = f"; the peak fell from batch {falls[0][0]} to {falls[0][1]}" if falls else ""
        if verify_error > 0 and rss:
            why = (
                f"{at_check}{fell}: the process RSS grew less than linearly. glibc returns "
                f"allocations above its mmap threshold (dynamic, at most "
                f"{GLIBC_MMAP_THRESHOLD_MAX // 2**20} MiB) to the system when freed, while "
                "smaller ones stay in the heap: where the batch's largest tensors cross it, "
                "the peak drops below the line through smaller batches"
            )
        elif verify_error > 0:
            why = f"{at_check}{fell}: the peak grew less than linearly with the batch"
        else:
            why = (
                f"{at_check}: the peak grew faster than linearly (allocator rounding or "
                "fragmentation that grows with the tensors)"
            )
        recheck_batch, recheck_error = recheck
        if recheck_batch is not None and recheck_error is not None:
            refit = (
                f"; refitted with batch {verify_batch}, the model predicted batch "
                f"{recheck_batch} {recheck_error:+.1%} off"
            )
            if abs(recheck_error) <= PREDICTION_TOLERANCE:
                return "confirmed", f"{why}{refit}, within {PREDICTION_TOLERANCE:.0%}"
            return "unreliable", f"{why}{refit}, beyond {PREDICTION_TOLERANCE:.0%} again"
        return "unreliable", why + "; the limit is refitted with the check's run"
    largest = max(measured, key=lambda p: p.batch, default=None)
    share = (
        fit.per_sample_bytes * largest.batch / largest.peak_bytes
        if largest is not None and largest.peak_bytes
        else 0.0
    )
    if fit.per_sample_bytes <= 0 or share < MIN_PER_SAMPLE_SHARE:
        return "weak", (
            f"{at_check}, within {PREDICTION_TOLERANCE:.0%}, but the per-sample part is "
            f"{share:.0%} of the peak at batch {largest.batch if largest else '?'} (under "
            f"{MIN_PER_SAMPLE_SHARE:.0%}): the fixed part alone would pass"
        )
    return "confirmed", f"{at_check}, within {PREDICTION_TOLERANCE:.0%}"


def recheck_batch(
    verify_batch: int, measured: Sequence[int], limit_batch: int | None
) -> int | None:
    """Where the refitted model is checked: twice the missed check's batch, or the refit's
    limit when that is nearer (a run there must fit); None when no unmeasured batch above
    the check is left below the limit."""
    candidate = 2 * verify_batch
    if limit_batch is not None:
        candidate = min(candidate, limit_batch)
    if candidate <= verify_batch or candidate in measured:
        return None
    return candidate
