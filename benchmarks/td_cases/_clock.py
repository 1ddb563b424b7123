"""The cases' own clock: wall time over the steps after the first `WARMUP`, printed at exit as
"ms/step mean M median D steps N" (the mean is steps over wall time: the figure a bursty
loader must be judged by). `CASE_FIX=1` in the environment makes a case apply its own fix,
so plain runs of both settings can be alternated without perfdoctor or train-doctor."""

from __future__ import annotations

import atexit
import itertools
import os
import statistics
import time

WARMUP = 5


def fixed() -> bool:
    return os.environ.get("CASE_FIX") == "1"


class Clock:
    def __init__(self) -> None:
        self.marks: list[float] = []
        atexit.register(self.report)  # also when a profiler stops the script early

    def tick(self) -> None:
        self.marks.append(time.perf_counter())

    def report(self) -> None:
        marks = self.marks[WARMUP:]
        if len(marks) < 2:
            return
        gaps = [(b - a) * 1000.0 for a, b in itertools.pairwise(marks)]
        mean = (marks[-1] - marks[0]) * 1000.0 / (len(marks) - 1)
        print(
            f"ms/step mean {mean:.3f} median {statistics.median(gaps):.3f} steps {len(gaps)}",
            flush=True,
        )
        self.marks = []
