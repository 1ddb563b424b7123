"""Measurements behind perfdoctor rule thresholds (CPU). Paired, alternating, medians.

    python benchmarks/rule_thresholds.py [--rounds 5] [--steps 25]

The figures and the thresholds they set are recorded in
perfdoctor/rules/threshold_measurements.md: anomaly mode's slowdown
(`anomaly-detection-on`), the gain of a second intra-op thread (`cpu-threads-below-cores`),
the p90/p50 of a well-tuned loop (`step-jitter`) and the RSS slope of a loop that keeps a
graph alive every step against one that does not (`memory-growth-*`).

Method: the two settings compared run alternately in the same process, --rounds times
--steps steps each; a round's figure is the median step time after its first 5 steps, and
the result the median over rounds. It prints, it never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import psutil
import torch
from _common import machine_line, out
from torch import nn

DROPPED_STEPS = 5


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "mlp": (mlp, lambda: torch.randn(128, 64)),
    "cnn": (cnn, lambda: torch.randn(32, 3, 32, 32)),
}


def steps(
    kind: str,
    n: int,
    anomaly: bool = False,
    threads: int | None = None,
    leak: list[torch.Tensor] | None = None,
) -> tuple[list[float], list[int]]:
    """Step times (ms) and RSS after each step, the first DROPPED_STEPS left out."""
    make, data = MODELS[kind]
    model = make()
    opt = torch.optim.Adam(model.parameters())
    x = data()
    y = torch.randint(0, 10, (x.shape[0],))
    default_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    times, rss = [], []
    proc = psutil.Process()
    try:
        with torch.autograd.set_detect_anomaly(anomaly):
            for _ in range(n):
                t = time.perf_counter()
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                if leak is not None:
                    leak.append(model(x).sum())  # keeps a graph alive every step
                times.append((time.perf_counter() - t) * 1e3)
                rss.append(proc.memory_info().rss)
    finally:
        torch.set_num_threads(default_threads)
    return times[DROPPED_STEPS:], rss[DROPPED_STEPS:]


def paired(kind: str, a: dict, b: dict, rounds: int, n: int) -> tuple[float, float]:
    ra, rb = [], []
    for _ in range(rounds):
        ra.append(statistics.median(steps(kind, n, **a)[0]))
        rb.append(statistics.median(steps(kind, n, **b)[0]))
    return statistics.median(ra), statistics.median(rb)


def slope(ys: Sequence[float]) -> float:
    xs = range(len(ys))
    mx = statistics.mean(xs)
    my = statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def rss_slope(rss: Sequence[int]) -> str:
    per_step = slope(rss)
    growth = per_step * len(rss) / rss[-1] * 100
    return (
        f"rss slope {per_step / 1024:.1f} KiB/step of {rss[-1] / 2**20:.0f} MiB "
        f"({growth:.2f}% over {len(rss)} steps)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=25, help="steps per round")
    parser.add_argument("--long-steps", type=int, default=60, help="steps of the RSS loops")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    out(machine_line())
    for kind in MODELS:
        base, anom = paired(kind, {}, {"anomaly": True}, args.rounds, args.steps)
        out(f"{kind}: anomaly off {base:.2f} ms, on {anom:.2f} ms, ratio {anom / base:.2f}")
        two, one = paired(kind, {"threads": 2}, {"threads": 1}, args.rounds, args.steps)
        out(
            f"{kind}: threads 2 {two:.2f} ms, threads 1 {one:.2f} ms, "
            f"speedup of 2 over 1 {one / two:.2f}"
        )
        t, r = steps(kind, args.long_steps)
        p50 = statistics.median(t)
        p90 = statistics.quantiles(t, n=10)[-1]
        out(f"{kind}: well-tuned p90/p50 {p90 / p50:.2f}; {rss_slope(r)}")
        _, r = steps(kind, args.long_steps, leak=[])
        out(f"{kind}: leaking   {rss_slope(r)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
