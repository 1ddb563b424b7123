"""Which rank the others wait for: the one definition of the straggler.

Ranks in lockstep meet in a collective every step (DDP's gradient all-reduce, the script's
own all_reduce or barrier), so they all share the step time, and a rank that arrives early
spends the difference waiting inside the collective. The straggler is the rank the others
wait for: the one that waits least there, that is the one with the most own work per step,
its step less its time with a collective in flight (steps.jsonl `comm_ms`,
collect/comm_watch.py). The transfer itself is in every rank's collective time, so what
differs between two ranks' own work is the wait.

Runs recorded before `comm_ms` have no collective time: their own work falls back to the
step's wall time outside forward and backward, where DDP's collectives run (the buffer
broadcast in forward, the gradient all-reduce in backward); a rank slower in its forward
or backward compute is then not seen.

On CUDA (NCCL) a collective returns once queued, so `comm_ms` is the host's part only and
the wait for a peer lands wherever the host next synchronizes: host timings tell a
straggler apart only on a host-side backend (gloo) or where that sync is a collective.

The ranks table (analyze/rank_table.py, render/summary.py) and the rank facts behind the
`rank-straggler` rule (analyze/facts.py) both use this module, so they name the same rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np

from perfdoctor.model import StepRecord

Key = TypeVar("Key")

# Said next to the ranks table and in the rule's evidence: the reader of both sees one rule.
DEFINITION = (
    "the straggler is the rank the others wait for: the one with the most own work per "
    "step, its step less its time in collectives (where the other ranks wait for it)"
)
FALLBACK_DEFINITION = (
    "no collective time recorded: own work is the step's wall time outside forward and "
    "backward, where DDP's collectives run"
)


def outside_forward_backward_ms(s: StepRecord) -> float:
    """A step's host time outside forward and backward: data, optimizer, the script's own
    code; DDP's collectives (and any wait for a peer in them) are left out."""
    return max(0.0, s.wall_ms - (s.forward_ms or 0.0) - (s.backward_ms or 0.0))


def comm_recorded(ranks: Iterable[Sequence[StepRecord]]) -> bool:
    """Whether the run recorded collective time: any rank's step has `comm_ms`. A process
    of such a run whose steps have none ran no collective (comm_watch records from the
    first one on), so it waited for nobody."""
    return any(s.comm_ms is not None for steps in ranks for s in steps)


def own_work_ms(s: StepRecord, with_comm: bool) -> float:
    """One step's own work: the step less its time with a collective in flight, or (runs
    without collective time, `with_comm` False) its time outside forward and backward."""
    if not with_comm:
        return outside_forward_backward_ms(s)
    return max(0.0, s.step_ms - (s.comm_ms or 0.0))


def own_work_ms_p50(steps: Sequence[StepRecord], with_comm: bool) -> float | None:
    """Median own work over one rank's timed steps; None without any."""
    if not steps:
        return None
    return float(np.median([own_work_ms(s, with_comm) for s in steps]))


def straggler_and_fastest(own: Iterable[tuple[Key, float | None]]) -> tuple[Key, Key] | None:
    """(the straggler, the fastest) among (rank, own work p50) pairs: the most and the least
    own work, the first in the given order on a tie; None with fewer than two known."""
    known = [(key, value) for key, value in own if value is not None]
    if len(known) < 2:
        return None
    slow = max(known, key=lambda kv: kv[1])  # max and min keep the first of equals
    fast = min(known, key=lambda kv: kv[1])
    return slow[0], fast[0]
