"""Several ranks of one job, from their traces: which rank holds the others up.

Ranks in lockstep meet in every collective, and a collective kernel on a rank lasts from that
rank's arrival until the last rank has arrived and the data has moved. So, collective by
collective, the rank whose kernel is the shortest is the one that arrived last: it waited
for nobody, and every other rank's kernel is longer by its wait for that rank. Matching the
k-th collective of each type across the ranks' traces gives, per rank, how often it arrived
last and how long it waited for the others; the rank that made the others wait the longest
is the one that holds the job up, and its own trace, not the waiting ranks', shows why.

This replaces the per-rank reading in which a waiting rank looks communication-heavy and
the late rank looks busy with something else: one job, one cause, on the late rank.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

Key = TypeVar("Key")

# The late rank must have arrived last at least at this share of the matched collectives,
# or the lateness moves between ranks and no single rank holds the job up (a choice: a
# plurality over chance, which for 8 ranks is 1/8).
MIN_LAST_SHARE = 0.25
# At least this many collectives matched across the ranks.
MIN_MATCHED = 2


@dataclass(frozen=True)
class JobWaits:
    """Who the ranks wait for, from their collectives."""

    late_rank: int
    matched: int  # collectives matched across every rank
    last_arrivals: Mapping[int, int]  # rank -> collectives it arrived last at
    wait_ms: Mapping[int, float]  # rank -> its wait for later ranks, over the trace
    held_ms: float  # the median other rank's wait, over the trace, less the late rank's
    kinds: tuple[str, ...]  # the collective types matched

    def wait_ms_per_step(self, rank: int, steps: int) -> float:
        return self.wait_ms[rank] / steps if steps > 0 else self.wait_ms[rank]


def job_waits(sequences: Mapping[int, Sequence[tuple[str, float]]]) -> JobWaits | None:
    """`sequences`: per rank, its collective kernels in start order as (type, duration µs).
    None with fewer than two ranks, too few matched collectives, or no rank late often
    enough to hold the others up."""
    if len(sequences) < 2:
        return None
    by_kind: dict[int, dict[str, list[float]]] = {}
    for rank, seq in sequences.items():
        kinds: dict[str, list[float]] = defaultdict(list)
        for kind, dur in seq:
            kinds[kind].append(dur)
        by_kind[rank] = kinds
    ranks = sorted(by_kind)
    shared = set.intersection(*(set(k) for k in by_kind.values()))
    last: dict[int, int] = dict.fromkeys(ranks, 0)
    wait: dict[int, float] = dict.fromkeys(ranks, 0.0)
    caused: dict[int, float] = dict.fromkeys(ranks, 0.0)
    matched = 0
    for kind in sorted(shared):
        count = min(len(by_kind[r][kind]) for r in ranks)
        for k in range(count):
            durs = np.array([by_kind[r][kind][k] for r in ranks])
            late = ranks[int(np.argmin(durs))]
            waits = durs - durs.min()
            last[late] += 1
            caused[late] += float(waits.sum())
            for r, w in zip(ranks, waits.tolist(), strict=True):
                wait[r] += w / 1000.0
            matched += 1
    if matched < MIN_MATCHED:
        return None
    late_rank = max(ranks, key=lambda r: (caused[r], last[r], -r))
    if last[late_rank] < MIN_LAST_SHARE * matched:
        return None
    others = [wait[r] for r in ranks if r != late_rank]
    return JobWaits(
        late_rank=late_rank,
        matched=matched,
        last_arrivals=last,
        wait_ms=wait,
        held_ms=max(0.0, float(np.median(others)) - wait[late_rank]),
        kinds=tuple(sorted(shared)),
    )


def ordered_for_job(
    ranks: Sequence[Key], rank_of: Callable[[Key], int | None], late: int
) -> list[Key]:
    """The late rank first (the report diagnoses its trace), the others in their order."""
    return sorted(ranks, key=lambda r: rank_of(r) != late)


def own_ms(job: JobWaits, rank: int, steps: int, job_step_ms: float) -> float:
    """A traced rank's own work per step: the job's step (ranks in lockstep share it; one
    profiled step's span differs between ranks by where each host's ProfilerStep fell) less
    its wait for the later ranks in the collectives. The late rank has the most."""
    return max(0.0, job_step_ms - job.wait_ms_per_step(rank, steps))


def job_facts(
    job: JobWaits | None, steps: int, ranks_traced: int, world: int | None
) -> dict[str, float | int | None]:
    if job is None:
        return {}
    return {
        "job_late_rank": job.late_rank,
        "job_late_rank_last_arrivals": job.last_arrivals[job.late_rank],
        "job_collectives_matched": job.matched,
        "job_held_ms_per_step": job.held_ms / steps if steps > 0 else job.held_ms,
        "ranks_traced": ranks_traced,
        "ranks_untraced": max(0, world - ranks_traced) if world else None,
    }


def job_note(job: JobWaits, steps: int, ranks_traced: int, world: int | None) -> str:
    """The line the report's warnings carry: which rank's trace the report diagnoses."""
    rank = job.late_rank
    held = job.held_ms / steps if steps > 0 else job.held_ms
    partial = (
        f" Only {ranks_traced} of {world} ranks were traced: an untraced rank may hold "
        "these up in turn."
        if world and world > ranks_traced
        else ""
    )
    return (
        f"job of {ranks_traced} traced ranks: rank {rank} arrives last at "
        f"{job.last_arrivals[rank]} of {job.matched} collectives matched across the traces "
        f"(the other ranks wait a median {held:.1f} ms per step for it), so this report "
        f"diagnoses rank {rank}'s trace: what slows it slows the job.{partial}"
    )
