"""The user's functions the stack sampler (collect/stack_sampler.py) found in chosen steps:
what fills a rollout or any long step between optimizer steps, by function and lines.
Pure: reads observations.json step_stacks rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The stack sampler's functions in the long steps: named when they hold at least this share of
# the samples that found the user's code, from at least this many samples (a 10 ms sampler
# gets ~5 in one 50 ms rollout), with this many of their lines shown.
CODE_MIN_SHARE = 0.15
CODE_MIN_SAMPLES = 5
CODE_LINES_SHOWN = 4


@dataclass(frozen=True)
class CodeShare:
    """A function of the user's that the stack sampler found in the long steps."""

    file: str
    function: str
    first_line: int  # where the function is defined
    lines: tuple[int, ...]  # its sampled lines, most samples first
    samples: int
    share: float  # of the main thread's sampled CPU time in the long steps (user frames)

    def describe(self) -> str:
        span = sorted(self.lines[:CODE_LINES_SHOWN])
        where = f"{self.file}:{span[0]}" if len(span) == 1 else f"{self.file}:{span[0]}-{span[-1]}"
        return f"{self.function}() at {where} ({self.share:.0%} of the sampled CPU time)"


def long_step_code(rows: Sequence[Sequence[Any]], steps: Sequence[int]) -> tuple[CodeShare, ...]:
    """The functions that hold CODE_MIN_SHARE or more of the main thread's sampled CPU time
    in these steps; rows are observations.json step_stacks rows [step, file, function, first
    line, line, samples, CPU ms]."""
    wanted = set(steps)
    by_fn: dict[tuple[str, str, int], dict[int, float]] = {}
    samples: Counter[tuple[str, str, int]] = Counter()
    total = 0.0
    count = 0
    for row in rows:
        if len(row) != 7 or row[0] not in wanted:
            continue
        _, file, function, first, line, n, ms = row
        if not isinstance(n, int) or n <= 0 or not isinstance(ms, (int, float)) or ms <= 0:
            continue
        key = (str(file), str(function), int(first))
        lines = by_fn.setdefault(key, {})
        lines[int(line)] = lines.get(int(line), 0.0) + float(ms)
        samples[key] += n
        total += float(ms)
        count += n
    if count < CODE_MIN_SAMPLES or total <= 0:
        return ()
    found = [
        CodeShare(
            file=file,
            function=function,
            first_line=first,
            lines=tuple(sorted(lines, key=lambda line: -lines[line])),
            samples=samples[(file, function, first)],
            share=sum(lines.values()) / total,
        )
        for (file, function, first), lines in by_fn.items()
    ]
    found.sort(key=lambda c: -c.share)
    return tuple(c for c in found if c.share >= CODE_MIN_SHARE)[:3]
