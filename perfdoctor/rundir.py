"""The run directory: the contract between the live side (collect/) and the offline core.

Layout of one `perfdoctor profile` session (documented in docs/run-directory.md)::

    perfdoctor-runs/<YYYYmmdd-HHMMSS>-<script>/      SESSION dir, also the TensorBoard logdir
        session.json                                 what was asked: target, plan, variants
        report.json  report.md  report.html          the reports
        <label>/                                     one CHILD run dir per variant ("baseline", ...)
            spec.json                                RunSpec: the only input the child reads
            manifest.json                            written by the parent, always (also on crash)
            observations.json                        what the child saw of the script (settings)
            steps.jsonl                              one StepRecord per line, flushed as it goes
            samples.jsonl                            device samples (parent: NVML/psutil)
            stdout.log  stderr.log                   the script's own output
            <host>_<pid>.<ns>.pt.trace.json.gz       profiler trace (trace-handler layout)
            memory_snapshot.pickle                   CUDA allocator history (CUDA only)
            events.out.tfevents.*                    per-step scalars for TensorBoard
            ranks/<k>/                               training process k >= 1 of a run with several
                                                     (observations, steps, trace; k = its rank)
            processes.json                           every training process: pid, host, rank, record
            procs/<host>-<pid>/                      a training sub-process, while the run goes
            repeat-<k>/                              further timing-only repeats of this variant
    perfdoctor-runs/latest -> <newest session>

Only this module knows file names; everybody else asks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from perfdoctor.errors import CorruptArtifact
from perfdoctor.model import (
    RunManifest,
    RunSpec,
    StepRecord,
)
from perfdoctor.run_schema import MAX_JSON_DEPTH, convert, decode_step_line, too_deep

SCHEMA_VERSION = 1

SESSION_FILE = "session.json"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# The accepted fixes as a diff of the user's files (written by the pipeline when there are any).
FIXES_PATCH = "fixes.patch"
LATEST_LINK = "latest"
BASELINE_LABEL = "baseline"

SPEC_FILE = "spec.json"
MANIFEST_FILE = "manifest.json"
OBSERVATIONS_FILE = "observations.json"
STEPS_FILE = "steps.jsonl"
SAMPLES_FILE = "samples.jsonl"
STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"
MEMORY_SNAPSHOT_FILE = "memory_snapshot.pickle"
COMPILE_FILE = "compile.json"  # what torch.compile did (collect/compile_watch.py)
AB_FILE = "ab.json"  # in-process A/B: blocks and verdicts (collect/ab_switch.py)
PROGRESS_FILE = "progress.jsonl"  # child -> parent live progress (one line per step)
BATCH_PROBE_FILE = "batch_probe.json"  # --plan-batch: a child run's peaks (run_schema)
BATCH_PLAN_FILE = "batch_plan.json"  # --plan-batch: the session's plan (run_schema)
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
REPEAT_PREFIX = "repeat-"
RANKS_DIR = "ranks"  # <child>/ranks/<k>/: ranks 1..N-1 of a multi-rank run (rank 0 is the child)
# Written by training sub-processes while the run goes (collect/process_tree.py), settled into
# the child dir and ranks/<k>/ when it ends (collect/tree_settle.py).
PROCS_DIR = "procs"
PROCESSES_FILE = "processes.json"  # <child>/processes.json: every process that trained

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows, which has no such links
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_dir_name(script_name: str, when: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    stem = Path(script_name).stem if script_name.endswith(".py") else script_name
    return f"{stamp}-{_UNSAFE.sub('_', stem.split('.')[-1]) or 'script'}"


def child_dir(session: Path, label: str, repeat: int = 1) -> Path:
    """Repeat 1 of a variant is its profiled run; later repeats are timing-only."""
    base = session / label
    return base if repeat <= 1 else base / f"{REPEAT_PREFIX}{repeat}"


def repeat_dirs(variant_dir: Path) -> list[Path]:
    """All runs of one variant, repeat 1 first."""
    extra = sorted(
        (p for p in variant_dir.glob(f"{REPEAT_PREFIX}*") if p.is_dir()),
        key=lambda p: int(p.name[len(REPEAT_PREFIX) :] or 0),
    )
    return [variant_dir, *extra]


def rank_dir(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` (>= 1) of a multi-rank child run keeps its record."""
    return run_dir / RANKS_DIR / str(rank)


def rank_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(rank, directory) of ranks 1..N-1 of a multi-rank child run, by rank; [] otherwise."""
    base = run_dir / RANKS_DIR
    if not base.is_dir():
        return []
    found = [(int(p.name), p) for p in base.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found)


def proc_dir(run_dir: Path, key: str) -> Path:
    """Where a training sub-process (`key` = "<host>-<pid>") writes while the run goes."""
    return run_dir / PROCS_DIR / _UNSAFE.sub("_", key)


def find_traces(run_dir: Path) -> list[Path]:
    """Profiler traces of one child run, oldest first."""
    found = [p for p in run_dir.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    return sorted(found, key=lambda p: p.name)


def is_session_dir(path: Path) -> bool:
    return (path / SESSION_FILE).is_file() or (path / BASELINE_LABEL / MANIFEST_FILE).is_file()


def is_child_dir(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file() or (path / SPEC_FILE).is_file()


def update_latest_link(runs_root: Path, session: Path) -> None:
    link = runs_root / LATEST_LINK
    try:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(session.name, target_is_directory=True)
    except OSError:
        # Filesystems without symlinks: the timestamped directory is still there.
        pass


# --------------------------------------------------------------------------- JSON helpers


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tuples and mappings -> plain JSON values (NaN/inf become None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict) or hasattr(obj, "items"):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_file(path: Path, data: bytes) -> None:
    """Write `data` as `path`, atomically and without following a symlink there.

    Run directories get handed around: a `report.md` in one may be a link to a file
    elsewhere, which a plain open(path, "w") would overwrite. The bytes go to a temporary file
    beside `path`, created exclusively (mkstemp: O_EXCL, so never through a planted link),
    which is then renamed over the name: a link there is replaced, its target left alone. A
    crash mid-write leaves the old file (or none), never half of one.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is not what open() would give
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(path: Path, obj: Any) -> None:
    """Atomic write, so a crash mid-write never leaves half a file behind (write_file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n"
    write_file(path, text.encode("utf-8", "backslashreplace"))


def read_json(path: Path) -> Any:
    """A run directory's JSON file. ValueError (json.JSONDecodeError) when it is not JSON;
    CorruptArtifact when it nests deeper than any file perfdoctor writes."""
    try:
        data = json.loads(path.read_text())
    except RecursionError:
        data = None
        deep = True
    else:
        deep = too_deep(data)
    if deep:
        raise CorruptArtifact(f"corrupt {path}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return data


def append_jsonl(path: Path, rows: Iterable[Any]) -> None:
    # O_NOFOLLOW: appended to as it is, never through a link planted at its name.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)
    with os.fdopen(fd, "a") as fh:
        for row in rows:
            fh.write(json.dumps(to_jsonable(row)) + "\n")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (the writer was killed) is skipped."""
    if not path.is_file():
        return
    with path.open() as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if not too_deep(row):
                yield row


# --------------------------------------------------------------------------- typed records


def spec_from_dict(data: Any) -> RunSpec:
    """spec.json's decoded JSON -> RunSpec, through msgspec: unknown keys are ignored, absent
    ones take their defaults; run_schema.SchemaMismatch for a missing required key or a value
    of the wrong type."""
    return convert(data, RunSpec)


def load_spec(run_dir: Path) -> RunSpec:
    return spec_from_dict(read_json(run_dir / SPEC_FILE))


def manifest_from_dict(data: Any) -> RunManifest:
    """manifest.json's decoded JSON -> RunManifest, as spec_from_dict does spec.json."""
    return convert(data, RunManifest)


def load_manifest(run_dir: Path) -> RunManifest:
    return manifest_from_dict(read_json(run_dir / MANIFEST_FILE))


def load_steps(run_dir: Path) -> list[StepRecord]:
    """steps.jsonl through its schema (run_schema.decode_step_line); a torn line (the writer
    was killed) is skipped, a row of the wrong type raises run_schema.SchemaMismatch."""
    return read_steps(run_dir).steps


# A step's time (wall_ms, device_ms) is a duration a step can take: above a nanosecond (the
# shortest step measured, an empty loop, takes microseconds) and below a year. 0, negative,
# NaN, 1e-300 or 1e308 ms is no measurement: the step is skipped as invalid input.
STEP_MS_MIN = 1e-6
STEP_MS_MAX = 365 * 24 * 3600 * 1e3


def usable_step_ms(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and STEP_MS_MIN <= value <= STEP_MS_MAX)


def usable_step(step: StepRecord) -> bool:
    """Whether the step's recorded times are durations a step can take."""
    return (
        step.wall_ms is not None and usable_step_ms(step.wall_ms) and usable_step_ms(step.device_ms)
    )


@dataclasses.dataclass(frozen=True)
class StepsFile:
    steps: list[StepRecord]
    found: bool  # False: there is no steps.jsonl
    unreadable: int  # lines that are no JSON step, a torn last line (writer killed) aside
    impossible: int = 0  # steps whose time no step can take (usable_step), skipped
    empty: bool = False  # the file is there but holds no line at all


def read_steps(run_dir: Path) -> StepsFile:
    """load_steps, saying whether the file was there and how many lines were skipped."""
    path = run_dir / STEPS_FILE
    if not path.is_file():
        return StepsFile([], False, 0)
    data = path.read_bytes()
    lines = data.splitlines()
    steps = []
    unreadable = impossible = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            step = decode_step_line(line)
        except msgspec.DecodeError:
            torn = i == len(lines) - 1 and not data.endswith(b"\n")
            unreadable += not torn
            continue
        if usable_step(step):
            steps.append(step)
        else:
            impossible += 1
    return StepsFile(steps, True, unreadable, impossible, empty=not data.strip())
