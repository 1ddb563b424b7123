"""Find profiler traces and CUDA memory snapshots under the paths given to `perfdoctor
diagnose`, and group them into runs and ranks.

Layouts recognised:

- `tensorboard_trace_handler` (torch.profiler, Lightning, HF): `<logdir>/<run>/<worker>.<ts>
  .pt.trace.json[.gz]`. Every directory holding such files is one run; each worker (often
  `<host>_<pid>`, or a name with the rank in it) is one rank; several files of one worker are
  several profiler windows, and the newest (largest `<ts>`) is analysed.
- Free names (`trace_rank-0.json.gz`, `trace_rank-1.json.gz`, `resnet.json`): files of one
  directory whose names differ only in a `rank<N>` part are the ranks of one run; any other
  file is a run of its own.
- `*.pickle` / `*.pkl` memory snapshots: beside exactly one run (and alone of their kind in
  the directory) they join that run; otherwise each is a run of its own.

Nothing here parses a whole trace: a file is told apart from other JSON by sniffing its
first bytes. The input is only read, never written.
"""

from __future__ import annotations

import gzip
import logging
import re
import stat
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfdoctor.errors import CorruptArtifact, TargetNotFound

log = logging.getLogger(__name__)

TRACE_SUFFIXES = (".json.gz", ".json")
SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
# The directory `perfdoctor diagnose` writes its own reports to: never read back as input.
OUTPUT_DIR_NAME = "perfdoctor-diagnose"
# `tensorboard_trace_handler`: f"{worker_name}.{time_ns}.pt.trace.json[.gz]"
_HANDLER_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ts>\d+)\.pt\.trace\.json(?:\.gz)?$")
_RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_]?(\d+)", re.IGNORECASE)
_SNIFF_BYTES = 1 << 16
# Old traces put a long computeProperties block before traceEvents, so any of these will do.
_TRACE_MARKERS = (b'"traceEvents"', b'"ph"', b'"schemaVersion"', b'"deviceProperties"')


@dataclass(frozen=True)
class RankInput:
    """One worker of a run: the trace analysed and the older windows left aside."""

    worker: str
    trace: Path
    rank_from_name: int | None
    older: tuple[Path, ...] = ()

    @property
    def windows(self) -> int:
        return 1 + len(self.older)


@dataclass(frozen=True)
class RunInput:
    """What one report is built from: the ranks' traces and, optionally, a snapshot."""

    name: str
    directory: Path
    ranks: tuple[RankInput, ...] = ()
    snapshot: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        paths = [r.trace for r in self.ranks]
        return (*paths, self.snapshot) if self.snapshot else tuple(paths)


@dataclass(frozen=True)
class Discovery:
    runs: tuple[RunInput, ...]
    notes: tuple[str, ...] = ()  # what was left aside, and why
    skipped: tuple[Path, ...] = field(default_factory=tuple)  # JSON files that are no traces


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def is_snapshot_name(path: Path) -> bool:
    return path.name.endswith(SNAPSHOT_SUFFIXES)


def looks_like_trace(path: Path) -> bool:
    """A kineto / Chrome trace starts with an object holding traceEvents (or a list of
    events with "ph"); report.json files and other JSON do not."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as fh:
                head = fh.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return False
    head = head.lstrip()
    if head.startswith(b"["):
        return b'"ph"' in head
    return head.startswith(b"{") and any(m in head for m in _TRACE_MARKERS)


def rank_from_name(name: str) -> int | None:
    found = _RANK_IN_NAME.findall(name)
    return int(found[-1]) if found else None


def _trace_stem(name: str) -> str:
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", *TRACE_SUFFIXES):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _walk(path: Path) -> Iterable[Path]:
    """Regular files under a directory, sorted, skipping our own output and hidden
    directories. A directory is entered once, however many links lead to it: two links to
    `.` would otherwise make the walk exponential (and a link to `/` endless)."""
    seen: set[tuple[int, int]] = set()
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            st = directory.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            children = sorted(directory.iterdir())
        except OSError:
            continue
        subdirs = []
        for child in children:
            if child.name.startswith(".") or child.name == OUTPUT_DIR_NAME:
                continue
            kind = _kind(child)
            if kind == "dir":
                subdirs.append(child)
            elif kind == "file":
                yield child
        pending.extend(reversed(subdirs))


def _kind(path: Path) -> str | None:
    """ "dir", "file" (a regular file), or None (missing, a FIFO, a device, a socket)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else None


def _collect(paths: Sequence[Path]) -> tuple[list[Path], list[Path], list[Path], set[Path]]:
    """(traces, snapshots, JSON files that are no traces, files named on the command line)."""
    traces: list[Path] = []
    snapshots: list[Path] = []
    others: list[Path] = []
    named: set[Path] = set()
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise TargetNotFound(f"{path} does not exist")
        # stat, never open: opening a FIFO blocks until someone writes to it.
        kind = _kind(path)
        if kind is None:
            raise CorruptArtifact(
                f"{path} is not a regular file (a FIFO, device or socket): give a trace, a "
                "snapshot or a directory"
            )
        if kind == "file":
            named.add(path)
            if is_snapshot_name(path):
                snapshots.append(path)
            elif is_trace_name(path) or looks_like_trace(path):
                if not looks_like_trace(path):
                    raise CorruptArtifact(f"{path} is not a torch.profiler / kineto trace")
                traces.append(path)
            else:
                raise CorruptArtifact(
                    f"{path} is neither a profiler trace (.json, .json.gz) nor a memory "
                    "snapshot (.pickle)"
                )
            continue
        for found in _walk(path):
            if is_snapshot_name(found):
                snapshots.append(found)
            elif is_trace_name(found):
                (traces if looks_like_trace(found) else others).append(found)
    return _dedupe(traces), _dedupe(snapshots), others, named


def _dedupe(paths: list[Path]) -> list[Path]:
    seen: dict[Path, Path] = {}
    for p in paths:
        seen.setdefault(p.resolve(), p)
    return list(seen.values())


def _handler_runs(directory: Path, files: list[Path], notes: list[str]) -> RunInput:
    by_worker: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    for f in files:
        m = _HANDLER_NAME.match(f.name)
        assert m is not None
        by_worker[m.group("worker")].append((int(m.group("ts")), f))
    ranks = []
    for worker in sorted(by_worker):
        windows = sorted(by_worker[worker], key=lambda tf: (tf[0], tf[1].name))
        newest = windows[-1][1]
        older = tuple(f for _, f in windows[:-1])
        if older:
            notes.append(
                f"worker {worker}: {len(windows)} profiler windows; analysed the newest, "
                f"{newest.name}"
            )
        ranks.append(RankInput(worker, newest, rank_from_name(worker), older))
    return RunInput(name=directory.name or str(directory), directory=directory, ranks=tuple(ranks))


def _free_name_runs(directory: Path, files: list[Path]) -> list[RunInput]:
    groups: dict[str, list[Path]] = defaultdict(list)
    for f in files:
        stem = _trace_stem(f.name)
        key = _RANK_IN_NAME.sub("rank*", stem) if rank_from_name(stem) is not None else stem
        groups[key].append(f)
    runs = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda f: (rank_from_name(f.name) or 0, f.name))
        ranks = tuple(
            RankInput(_trace_stem(f.name), f, rank_from_name(_trace_stem(f.name))) for f in members
        )
        # "ranks" names a group; one rank's file keeps its own name (a lone rank-0 trace
        # was titled "..._ranks").
        name = key.replace("rank*", "ranks") if len(members) > 1 else _trace_stem(members[0].name)
        runs.append(RunInput(name=name, directory=directory, ranks=ranks))
    return runs


def discover(paths: Sequence[Path]) -> Discovery:
    """Runs to diagnose under `paths` (files and directories, in any mix).

    Raises TargetNotFound for a path that does not exist, CorruptArtifact for a named file
    that is no trace or snapshot, and TargetNotFound when nothing usable was found at all.
    """
    traces, snapshots, others, named = _collect(paths)
    notes: list[str] = []
    if others:
        names = ", ".join(p.name for p in others[:3]) + (" ..." if len(others) > 3 else "")
        notes.append(f"skipped {len(others)} JSON file(s) that are not profiler traces: {names}")
    by_dir: dict[Path, list[Path]] = defaultdict(list)
    for t in traces:
        by_dir[t.parent].append(t)
    runs: list[RunInput] = []
    for directory in sorted(by_dir, key=str):
        files = by_dir[directory]
        handler = [f for f in files if _HANDLER_NAME.match(f.name)]
        free = [f for f in files if not _HANDLER_NAME.match(f.name)]
        if handler:
            run = _handler_runs(directory, handler, notes)
            # One worker named on the command line, or beside other runs: its own name, not
            # the directory's (a logdir's <run>/ directory names its run).
            alone = len(run.ranks) == 1 and (free or run.ranks[0].trace in named)
            if alone:
                run = RunInput(run.ranks[0].worker, directory, run.ranks)
            runs.append(run)
        runs.extend(_free_name_runs(directory, free))
    snaps_by_dir: dict[Path, list[Path]] = defaultdict(list)
    for s in snapshots:
        snaps_by_dir[s.parent].append(s)
    for directory, snaps in sorted(snaps_by_dir.items(), key=lambda kv: str(kv[0])):
        beside = [i for i, r in enumerate(runs) if r.directory == directory]
        if len(beside) == 1 and len(snaps) == 1:
            i = beside[0]
            runs[i] = RunInput(runs[i].name, directory, runs[i].ranks, snaps[0])
            continue
        for snap in sorted(snaps):
            runs.append(RunInput(name=snap.stem, directory=directory, snapshot=snap))
    if not runs:
        where = ", ".join(str(p) for p in paths)
        raise TargetNotFound(f"no trace or snapshot found in {where}")
    return Discovery(runs=_unique_names(runs), notes=tuple(notes), skipped=tuple(others))


def _unique_names(runs: list[RunInput]) -> tuple[RunInput, ...]:
    """Run names are directory names in the output: two runs never share one."""
    counts: dict[str, int] = defaultdict(int)
    out = []
    for run in runs:
        name = re.sub(r"[^A-Za-z0-9._+-]+", "_", run.name).strip("._") or "run"
        counts[name] += 1
        if counts[name] > 1:
            name = f"{name}-{counts[name]}"
        out.append(RunInput(name, run.directory, run.ranks, run.snapshot))
    return tuple(out)
