"""Every training process of a perfdoctor run, one row each: the report's ranks table.

A run with several training processes (torchrun ranks, torch.multiprocessing.spawn workers,
Hogwild trainers, ranks of other nodes) keeps one record per process: the lead's in the run
directory, the others' in `ranks/<k>/` (collect/tree_settle.py). Each row is that process's
timed steps: step, data wait, and its communication share, the time with a torch.distributed
collective in flight (steps.jsonl `comm_ms`, collect/comm_watch.py) over its step. `own` is
the step less that time, as for ranks diagnosed from traces (model.RankSummary).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfdoctor.analyze import straggler
from perfdoctor.analyze.record import RunRecord
from perfdoctor.analyze.run_stats import median_or_none
from perfdoctor.model import RankSummary, StepRecord
from perfdoctor.run_schema import ProcessInfo


def comm_frac(steps: Sequence[StepRecord]) -> float | None:
    """Median share of a process's timed step with a collective in flight; None when it
    recorded no communication (no process group, or a run recorded before comm_ms)."""
    timed = [s for s in steps if s.comm_ms is not None]
    if not timed:
        return None
    step = median_or_none([s.step_ms for s in timed])
    comm = median_or_none([float(s.comm_ms or 0.0) for s in timed])
    if not step or comm is None:
        return None
    return min(1.0, comm / step)


def comm_fracs(record: RunRecord) -> dict[int, float]:
    """rank -> communication share, for the processes that recorded any."""
    found = {0: comm_frac(record.timed_steps)}
    found.update({r.rank: comm_frac(r.timed_steps) for r in record.ranks})
    return {rank: frac for rank, frac in found.items() if frac is not None}


def _worker(info: ProcessInfo | None, several_nodes: bool) -> str:
    """'node 1, host-b pid 4242': where the process ran."""
    info = info or ProcessInfo()
    host, pid, node = info.host, info.pid, info.node_rank
    parts = []
    if several_nodes and node is not None:
        parts.append(f"node {node}")
    where = " ".join(p for p in (str(host) if host else "", f"pid {pid}" if pid else "") if p)
    if where:
        parts.append(where)
    return ", ".join(parts) or "this process"


def _row(
    rank: int,
    directory: str,
    steps: Sequence[StepRecord],
    info: ProcessInfo | None,
    nodes: bool,
    with_comm: bool,
) -> RankSummary:
    timed = [s for s in steps if s.phase == "timed"]
    step_p50 = median_or_none([s.step_ms for s in timed])
    waits = [s.data_wait_ms for s in timed if s.data_wait_ms is not None]
    total = sum(s.step_ms for s in timed)
    comm = comm_frac(timed)
    return RankSummary(
        # A process without a process group (a Hogwild trainer) has no rank to show.
        rank=info.rank if info is not None else rank,
        worker=_worker(info, nodes),
        trace=directory,
        steps=len(timed),
        step_ms_p50=step_p50,
        data_wait_ms_p50=median_or_none(waits),
        data_wait_frac=sum(waits) / total if waits and total > 0 else None,
        comm_frac=comm,
        own_ms_p50=straggler.own_work_ms_p50(timed, with_comm),
    )


def rank_summaries(record: RunRecord) -> tuple[RankSummary, ...]:
    """One row per training process, the lead first; () for a run of one process."""
    if not record.ranks:
        return ()
    infos = [record.observed.process, *(r.observed.process for r in record.ranks)]
    nodes = len({i.node_rank for i in infos if i is not None} - {None}) > 1
    with_comm = straggler.comm_recorded(
        [record.timed_steps, *(r.timed_steps for r in record.ranks)]
    )
    rows = [_row(0, str(record.dir), record.steps, infos[0], nodes, with_comm)]
    for rank, info in zip(record.ranks, infos[1:], strict=True):
        rows.append(_row(rank.rank, str(rank.dir), rank.steps, info, nodes, with_comm))
    return tuple(rows)
