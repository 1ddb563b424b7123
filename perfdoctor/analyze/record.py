"""One child run directory -> RunRecord: everything the analysis reads, loaded once.

Missing artifacts are normal (a crash before the profiler window, a CPU run without a memory
snapshot) and load as None / empty. A present artifact that cannot be read raises
CorruptArtifact naming the file; a directory that is no run directory raises BadRunDir.

observations.json, steps.jsonl, progress.jsonl and samples.jsonl are decoded through their
schemas (perfdoctor/run_schema.py): a value of the wrong type fails in one line that names the
run directory's schema version and the one this perfdoctor reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from perfdoctor import run_schema, rundir
from perfdoctor.analyze.memory import MemorySummary, load_memory
from perfdoctor.analyze.trace import TraceSummary, load_trace
from perfdoctor.errors import BadRunDir, CorruptArtifact
from perfdoctor.model import RunManifest, RunSpec, StepRecord
from perfdoctor.run_schema import Observations, ProgressRow, SampleRow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankRecord:
    """Rank k >= 1 of a multi-rank run (`<run>/ranks/<k>/`): what the analysis compares."""

    rank: int
    dir: Path
    manifest: RunManifest | None
    steps: tuple[StepRecord, ...]
    observed: Observations = field(default_factory=Observations)  # its observations.json

    @property
    def timed_steps(self) -> tuple[StepRecord, ...]:
        return tuple(s for s in self.steps if s.phase == "timed")


@dataclass(frozen=True)
class RunRecord:
    dir: Path
    spec: RunSpec | None
    manifest: RunManifest | None
    observations: dict[str, Any]
    steps: tuple[StepRecord, ...]
    samples: tuple[SampleRow, ...]
    trace: TraceSummary | None
    memory: MemorySummary | None
    progress: tuple[ProgressRow, ...] = ()
    trace_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    ranks: tuple[RankRecord, ...] = ()  # ranks 1..N-1 of a --nproc-per-node run; rank 0 is this
    # `observations` decoded through run_schema.Observations: what the analysis reads. The raw
    # dict stays for the settings the reports show as the child wrote them.
    observed: Observations = field(default_factory=Observations)

    @property
    def ranks_launched(self) -> int:
        return 1 + len(self.ranks)

    @property
    def timed_steps(self) -> tuple[StepRecord, ...]:
        return tuple(s for s in self.steps if s.phase == "timed")


def _load_json(path: Path, parse: Any) -> Any:
    if not path.is_file():
        return None
    try:
        return parse(rundir.read_json(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        # ValueError covers json.JSONDecodeError; KeyError/TypeError a wrong shape.
        raise CorruptArtifact(f"corrupt {path}: {err.__class__.__name__}: {err}") from err


def _version_line(version: int | None) -> str:
    expected = run_schema.RUN_SCHEMA_VERSION
    found = f"schema version {version}" if version is not None else "no schema version (before 2)"
    return f"written with {found}; this perfdoctor reads schema version {expected}"


def _mismatch(path: Path, err: Exception, version: int | None) -> CorruptArtifact:
    return CorruptArtifact(f"cannot read {path}: {_version_line(version)}: {err}")


def _load_manifest(path: Path, fallback: int | None = None) -> RunManifest | None:
    """manifest.json, typed. It names its own schema version, read before it is decoded so
    that a manifest of another version fails in one line naming it."""
    raw = _load_json(path, lambda d: d)
    if raw is None:
        return None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    return _typed(
        path, raw, rundir.manifest_from_dict, version if version is not None else fallback
    )


def _load_spec(path: Path, version: int | None) -> RunSpec | None:
    raw = _load_json(path, lambda d: d)
    return None if raw is None else _typed(path, raw, rundir.spec_from_dict, version)


def _typed(path: Path, raw: Any, decode: Any, version: int | None) -> Any:
    try:
        return decode(raw)
    except run_schema.SchemaMismatch as err:
        raise _mismatch(path, err, version) from err


def _schema_version(manifest: RunManifest | None) -> int | None:
    return manifest.schema_version if manifest is not None else None


def _load_observations(path: Path, version: int | None) -> tuple[dict[str, Any], Observations]:
    raw = _load_json(path, lambda d: d) or {}
    if not isinstance(raw, dict):
        raise CorruptArtifact(f"corrupt {path}: not an object")
    try:
        return raw, run_schema.observations(raw)
    except run_schema.SchemaMismatch as err:
        raise _mismatch(path, err, version) from err


def _lines(path: Path) -> list[bytes]:
    if not path.is_file():
        return []
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError as err:
        raise CorruptArtifact(f"cannot read {path}: {err}") from err


def _load_steps(
    run: Path, version: int | None, notes: list[str] | None = None
) -> tuple[StepRecord, ...]:
    """The steps; what was missing or unreadable goes to `notes` (the report's warnings)."""
    path = run / rundir.STEPS_FILE
    try:
        found = rundir.read_steps(run)
        if notes is not None and not found.found:
            notes.append(f"{path} is missing: no step was recorded, so there are no step figures")
        if notes is not None and found.empty:
            notes.append(f"{path} is empty: no step was recorded, so there are no step figures")
        if notes is not None and found.unreadable:
            notes.append(
                f"{path}: {found.unreadable} line(s) could not be read as steps and were "
                f"skipped ({len(found.steps)} read)"
            )
        if notes is not None and found.impossible:
            notes.append(
                f"invalid input: {path}: {found.impossible} step(s) record a time no step can "
                f"take (0, negative, NaN or beyond a year) and were skipped "
                f"({len(found.steps)} kept)"
            )
        return tuple(found.steps)
    except run_schema.SchemaMismatch as err:
        raise _mismatch(path, err, version) from err
    except OSError as err:
        raise CorruptArtifact(f"cannot read {path}: {err}") from err


def _rows(path: Path, decode: Any, version: int | None) -> list[Any]:
    """The rows of a JSONL file, each decoded through its schema (`decode` returns None for a
    row to skip); a torn line or one that is no JSON object is skipped."""
    rows = []
    for line in _lines(path):
        try:
            data = run_schema.decode_json_line(line)
        except msgspec.DecodeError:
            continue
        if not isinstance(data, dict):
            continue
        try:
            row = decode(data)
        except run_schema.SchemaMismatch as err:
            raise _mismatch(path, err, version) from err
        if row is not None:
            rows.append(row)
    return rows


def _user_roots(spec: RunSpec | None) -> tuple[str, ...]:
    """Where the user's own code lives: the script's directory and the working directory."""
    if spec is None:
        return ()
    roots = [spec.cwd]
    scripts = [a for a in spec.target.argv if a.endswith(".py")]  # a launcher's script
    name = spec.target.name if spec.target.kind == "script" else next(iter(scripts), None)
    if name is not None and spec.target.kind != "module":
        script = Path(name)
        if not script.is_absolute():
            script = Path(spec.cwd) / script
        roots.insert(0, str(script.parent))
    return tuple(roots)


def _newest_trace(run: Path) -> tuple[Path | None, tuple[str, ...]]:
    """The trace of the last profiler window; names end in `.<time_ns>.pt.trace.json[.gz]`."""
    found = rundir.find_traces(run)
    if not found:
        return None, ()

    def stamp(p: Path) -> int:
        stem = p.name
        for suffix in rundir.TRACE_SUFFIXES:
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        tail = stem.rsplit(".", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    ordered = sorted(found, key=lambda p: (stamp(p), p.name))
    return ordered[-1], tuple(p.name for p in ordered)


def load_run(
    child_dir: Path, *, with_trace: bool = True, skip_corrupt_trace: bool = False
) -> RunRecord:
    """One child run directory, decoded. `with_trace=False` leaves the profiler trace unread
    (its path is still found): what the A/B verdicts need, at a fraction of the time.
    `skip_corrupt_trace`: a trace that cannot be read is left out with a note (a session's
    report) instead of raising CorruptArtifact."""
    child_dir = Path(child_dir)
    if not child_dir.is_dir():
        raise BadRunDir(f"{child_dir} is not a directory")
    if not rundir.is_child_dir(child_dir):
        raise BadRunDir(
            f"{child_dir} is not a perfdoctor run directory (no {rundir.MANIFEST_FILE} "
            f"or {rundir.SPEC_FILE})"
        )
    manifest = _load_manifest(child_dir / rundir.MANIFEST_FILE)
    version = _schema_version(manifest)
    spec = _load_spec(child_dir / rundir.SPEC_FILE, version)
    observations, observed = _load_observations(child_dir / rundir.OBSERVATIONS_FILE, version)
    notes: list[str] = []
    roots = _user_roots(spec)

    trace_path, trace_files = _newest_trace(child_dir)
    trace = None
    if trace_path is not None and with_trace:
        try:
            trace = load_trace(trace_path, roots)
        except CorruptArtifact as err:
            if not skip_corrupt_trace:
                raise
            # The run completed: its report comes without the trace's facts, not at all.
            notes.append(f"trace not used: {err}")
    if len(trace_files) > 1:
        notes.append(f"{len(trace_files)} traces found; analysed the newest, {trace_files[-1]}")

    steps = _load_steps(child_dir, version, notes)
    memory = None
    snapshot = child_dir / rundir.MEMORY_SNAPSHOT_FILE
    if snapshot.is_file():
        history = observed.memory_history
        max_entries = spec.memory_history_max_entries if spec else None
        if max_entries is None and history is not None:
            max_entries = history.max_entries
        memory = load_memory(snapshot, user_roots=roots, max_entries=max_entries)
    return RunRecord(
        dir=child_dir,
        spec=spec,
        manifest=manifest,
        observations=observations,
        observed=observed,
        steps=steps,
        samples=tuple(_rows(child_dir / rundir.SAMPLES_FILE, run_schema.known_sample, version)),
        trace=trace,
        memory=memory,
        progress=tuple(_rows(child_dir / rundir.PROGRESS_FILE, run_schema.progress_row, version)),
        trace_files=trace_files,
        notes=tuple(notes),
        ranks=tuple(_load_rank(rank, path, version) for rank, path in rundir.rank_dirs(child_dir)),
    )


def _load_rank(rank: int, path: Path, run_version: int | None) -> RankRecord:
    manifest = _load_manifest(path / rundir.MANIFEST_FILE, run_version)
    version = _schema_version(manifest) if manifest is not None else run_version
    _, observed = _load_observations(path / rundir.OBSERVATIONS_FILE, version)
    return RankRecord(
        rank=rank,
        dir=path,
        manifest=manifest,
        observed=observed,
        steps=_load_steps(path, version),
    )
