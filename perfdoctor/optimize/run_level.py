"""The run-level noise band of an A/B comparison: a Student-t interval over the pairs.

Each pair's log ratio log(median baseline / median variant) carries both the step-to-step
noise inside the two runs and the run-to-run noise between launches, so the t interval of
their mean covers both, and it narrows as pairs are added (optimize/sequential.py relies on
that). With fewer than 3 pairs it is too wide to use (t(1) = 12.7 at 95%).

Pure: no torch, no scipy.
"""

from __future__ import annotations

import math

# Pairs needed before a run-level band is formed at all.
MIN_RUN_LEVEL_PAIRS = 3


def student_t_quantile(p: float, df: int) -> float:
    """The p-quantile (p in (0.5, 1)) of Student's t with `df` degrees of freedom: bisection
    on its CDF, integrated by Simpson's rule (no scipy in the pure core)."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError("p must be in (0.5, 1) and df >= 1")
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    def cdf(x: float) -> float:
        intervals = 2 * max(200, int(x * 100))
        h = x / intervals
        total = density(0.0) + density(x)
        for i in range(1, intervals):
            total += (4 if i % 2 else 2) * density(i * h)
        return 0.5 + total * h / 3

    low, high = 0.0, 1.0
    while cdf(high) < p:
        low, high = high, high * 2
    for _ in range(50):
        mid = (low + high) / 2
        if cdf(mid) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def run_level_half_width(log_ratios: list[float], confidence: float) -> float | None:
    """t(n-1) x sd / sqrt(n) of the pair log ratios (None with fewer than 3 pairs)."""
    n = len(log_ratios)
    if n < MIN_RUN_LEVEL_PAIRS:
        return None
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1))
    return student_t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * sd / math.sqrt(n)
