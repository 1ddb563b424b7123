"""psutil sampler: per-core CPU utilization, and the child's (and its workers') RSS and CPU.

This is the device sampler of CPU-only runs and the host view on GPU runs: a DataLoader-bound
job shows as busy worker processes, or as one core pinned by the main process. Rows
(docs/run-directory.md)::

    {"kind": "cpu", "cpu_percent": [..per core..], "rss_bytes": ..., "child_cpu_percent": ...,
     "workers": n, "workers_rss_bytes": ..., "workers_cpu_percent": ...}

`rss_bytes` and `child_cpu_percent` are the child process itself; the `workers_*` fields sum
its descendants (DataLoader workers). RSS of forked workers counts shared copy-on-write pages
once per process, so the sum overstates what they use together.

Own processes are never other processes. `workers_cpu_percent` is counted from CPU time, not
from psutil's per-object cpu_percent(): that reads 0 at a process's first reading, and a
process that ends between two readings is never read at all, so DataLoader workers restarted
every short epoch (or a compile worker that lives half a second) were counted as "other
processes" keeping the machine busy (on a quiet 2-core machine, 2 workers of perfdoctor's own
variant read as 1.6 other busy cores). Here a descendant seen for the first time counts its
CPU time since it started, a known one its CPU time since the last reading, and one that ended
and was reaped counts through the child's `children_user/children_system` times, less what
was already counted of it while it ran.

In a multi-rank run the child is rank 0 and `peers` are the other ranks: `ranks` counts those
still running, and `ranks_cpu_percent` / `ranks_rss_bytes` sum them with their own workers,
so the machine's load is not mistaken for other processes' (`cpu_other_busy_cores`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from perfdoctor.collect.sampling import Row, note

logger = logging.getLogger(__name__)

# The child's and the peers' descendants are looked up again at most this often. A lookup
# reads every process on the machine (psutil's ppid map), once for the child and once per
# listed peer: 1.6 ms a tick with 120 processes and 18 ms with 1,000 (measured here), so at
# 10 Hz on a busy node, or with several ranks, the sampler would take a real share of a core
# from the training. Reading the processes already known costs little each tick; one that
# ended drops out at once, and one started since the last lookup is counted from the next.
TREE_LOOKUP_PERIOD_S = 1.0


class CpuSampler:
    name = "cpu"

    def __init__(
        self,
        pid: int,
        *,
        peers: Sequence[int] = (),
        psutil_module: ModuleType | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_lookup: Callable[[list[Any]], None] | None = None,
    ) -> None:
        """`on_lookup`: called with the child's descendants each time they are looked up
        (supervision.ProcessTree.saw), so the parent reads the machine's processes once a
        second, not once for the sampler and once for the tree."""
        self._pid = pid
        self._on_lookup = on_lookup
        self._clock = clock
        self._next_lookup = -float("inf")
        self._peer_pids = tuple(peers)
        self._peers: dict[int, Any] = {}  # pid -> Process, the peers and their descendants
        self._psutil = psutil_module
        self._process: Any = None
        # psutil's cpu_percent() is "since the previous call on this object", so the Process
        # objects of the workers are kept from one tick to the next.
        self._workers: dict[int, Any] = {}
        self._child_gone = False
        # CPU-time accounting of the child's descendants (`_workers_cpu_s`).
        self._cpu_s: dict[int, float] = {}  # pid -> user+system at its last reading
        self._reaped_s: float | None = None  # the child's children_user + children_system
        self._departed_s = 0.0  # counted CPU of descendants gone but not yet reaped
        self._last_t: float | None = None
        self._own_last: tuple[float, float] | None = None

    def start(self) -> list[Row]:
        if self._psutil is None:
            try:
                import psutil
            except ImportError:
                self._psutil = None
                return [note("CPU sampling unavailable: psutil is not installed")]
            self._psutil = psutil
        ps = self._psutil
        ps.cpu_percent(percpu=True)  # primes the per-core counters; the first reading is 0
        try:
            self._process = ps.Process(self._pid)
            self._process.cpu_percent()
        except ps.Error as err:
            self._child_gone = True
            return [note(f"CPU sampling: child process {self._pid} not found ({err})")]
        return []

    def sample(self) -> list[Row]:
        ps = self._psutil
        if ps is None:
            return []
        row: Row = {"kind": "cpu", "cpu_percent": ps.cpu_percent(percpu=True)}
        now = self._clock()
        lookup = now >= self._next_lookup
        if lookup:
            self._next_lookup = now + TREE_LOOKUP_PERIOD_S
        if self._process is not None and not self._child_gone:
            row.update(self._child_fields(ps, lookup))
        if self._peer_pids:
            row.update(self._peer_fields(ps, lookup))
        own = self._own_percent(now) if self._pid != os.getpid() else None
        if own is not None:
            row["perfdoctor_cpu_percent"] = own
        return [row]

    def _own_percent(self, now: float) -> float | None:
        """CPU percent of the process that samples (perfdoctor's parent: the launcher, this
        sampler, the progress display): perfdoctor's own, never other processes' load."""
        try:
            times = os.times()
        except OSError:
            return None
        total = times.user + times.system
        last = self._own_last
        self._own_last = (now, total)
        if last is None or now <= last[0]:
            return None
        return round(100.0 * max(0.0, total - last[1]) / (now - last[0]), 1)

    def stop(self) -> None:
        self._workers.clear()
        self._peers.clear()

    def _peer_fields(self, ps: ModuleType, lookup: bool) -> Row:
        found: list[Any] = [] if lookup else list(self._peers.values())
        for pid in self._peer_pids if lookup else ():
            try:
                peer = self._peers.get(pid) or ps.Process(pid)
                found.append(peer)
                found.extend(peer.children(recursive=True))
            except ps.Error:
                continue
        alive: dict[int, Any] = {}
        rss = 0
        cpu = 0.0
        for proc in found:
            kept = self._peers.get(proc.pid, proc)
            try:
                with kept.oneshot():
                    rss += kept.memory_info().rss
                    cpu += kept.cpu_percent()  # 0.0 at a process's first reading
            except ps.Error:
                continue
            alive[proc.pid] = kept
        self._peers = alive
        running = sum(pid in alive for pid in self._peer_pids)
        return {"ranks": running, "ranks_rss_bytes": rss, "ranks_cpu_percent": round(cpu, 1)}

    def _child_fields(self, ps: ModuleType, lookup: bool) -> Row:
        proc = self._process
        try:
            with proc.oneshot():
                fields: Row = {
                    "rss_bytes": proc.memory_info().rss,
                    "child_cpu_percent": proc.cpu_percent(),
                }
            descendants = proc.children(recursive=True) if lookup else list(self._workers.values())
            if lookup and self._on_lookup is not None:
                self._on_lookup(descendants)
        except ps.Error:
            # The child ended between two ticks: keep reporting the machine's cores.
            self._child_gone = True
            return {}
        alive: dict[int, Any] = {}
        rss = 0
        spent_s = 0.0
        seen_s: dict[int, float] = {}
        for found in descendants:
            worker = self._workers.get(found.pid, found)
            try:
                with worker.oneshot():
                    rss += worker.memory_info().rss
                    times = worker.cpu_times()
            except ps.Error:
                continue
            total = float(times.user) + float(times.system)
            spent_s += max(0.0, total - self._cpu_s.get(found.pid, 0.0))
            seen_s[found.pid] = total
            alive[found.pid] = worker
        spent_s += self._reaped_since(proc, seen_s)
        self._workers = alive
        now = self._clock()
        fields["workers"] = len(alive)
        if alive:
            fields["workers_rss_bytes"] = rss
        if self._last_t is not None and now > self._last_t and (alive or spent_s > 0):
            fields["workers_cpu_percent"] = round(100.0 * spent_s / (now - self._last_t), 1)
        self._last_t = now
        return fields

    def _reaped_since(self, proc: Any, seen_s: dict[int, float]) -> float:
        """CPU time of descendants reaped since the last reading that was not counted while
        they ran (a worker that lived between two readings is counted whole)."""
        for pid, last in self._cpu_s.items():
            if pid not in seen_s:
                self._departed_s += last  # counted already; its reaped total includes it
        self._cpu_s = seen_s
        try:
            times = proc.cpu_times()
            reaped = float(getattr(times, "children_user", 0.0)) + float(
                getattr(times, "children_system", 0.0)
            )
        except Exception:  # the child ended: its reaped children end with it
            return 0.0
        if self._reaped_s is None:
            self._reaped_s = reaped
            self._departed_s = 0.0
            return 0.0
        grown = max(0.0, reaped - self._reaped_s)
        self._reaped_s = reaped
        extra = max(0.0, grown - self._departed_s)
        self._departed_s = max(0.0, self._departed_s - grown)
        return extra
