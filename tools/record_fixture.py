"""Record a run directory from a sample model and trim it into a small, committable test fixture.

    python tools/record_fixture.py sample_models/gpt_char_lm.py --out tests/fixtures/runs/gpt_cpu
    python tools/record_fixture.py sample_models/cnn_slow_dataloader.py \\
        --out tests/fixtures/runs/cnn_cuda --steps 5 -- --epochs 1

The run uses the real launcher (perfdoctor.collect.launcher.launch) on whatever device is
present, with a small plan (2 warm-up, 5 timed, 2 profiled steps by default), into a scratch
directory. `trim_run_dir` then copies what the offline analysis reads into `--out`, small
enough to commit (the aim is < 300 KB, counting every file as it would be gzipped):

- spec / manifest / observations / steps (and compile.json, processes.json where the run wrote
  them) are kept as they are, except that paths under the repository are made relative (spec
  `cwd` -> ".", `run_dir` -> the fixture's own path, the scratch run directory -> the
  fixture's path in every other record), so no machine-specific absolute path is committed;
- a run with several training processes (`--nproc-per-node`, a spawned or Hogwild trainer)
  keeps each further process's record under `ranks/<k>/`, trimmed the same way (the analysis
  reads their observations and steps);
- the profiler trace keeps only events that overlap the first two `ProfilerStep#N` spans (plus
  metadata, and GPU work launched from inside them); if that is still over budget, Python
  frames of library code (numpy, builtins, torch internals) that contain no aten op and no
  frame of the user's own code are dropped, with `Python parent id` re-pointed past them, so
  the source attribution the analysis does (user file:line of syncs, data loading, ...) is
  unchanged. It is re-gzipped under the trace-handler name;
- samples.jsonl is subsampled evenly (notes are always kept);
- the CUDA memory snapshot keeps its segments and the LAST `--max-memory-entries` history
  entries of each device: the allocator's own ring buffer truncates the same way, so the
  analysis already expects a history that starts late;
- stdout/stderr keep their last lines; progress.jsonl and TensorBoard event files are dropped.

Each recording adds (or replaces) one line in `<out parent>/README.md` saying what was recorded,
on what device, with which torch, and when.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import gzip
import json
import logging
import pickle
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # runnable as `python tools/record_fixture.py` from a checkout
    sys.path.insert(0, str(REPO_ROOT))

from perfdoctor.analyze.frames import UserCode  # noqa: E402
from perfdoctor.analyze.memory import load_snapshot  # noqa: E402
from perfdoctor.model import RunManifest, RunSpec, StepPlan, Target  # noqa: E402
from perfdoctor.rundir import (  # noqa: E402
    BASELINE_LABEL,
    COMPILE_FILE,
    MANIFEST_FILE,
    MEMORY_SNAPSHOT_FILE,
    OBSERVATIONS_FILE,
    PROCESSES_FILE,
    SAMPLES_FILE,
    SPEC_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STEPS_FILE,
    find_traces,
    rank_dir,
    rank_dirs,
    read_json,
    read_jsonl,
    write_json,
)

log = logging.getLogger("record_fixture")

DEFAULT_PLAN = StepPlan(warmup_steps=2, timed_steps=5, profiled_steps=2)
BUDGET_BYTES = 300_000
KEEP_TRACE_STEPS = 2
MAX_SAMPLE_ROWS = 300
MAX_MEMORY_ENTRIES = 3000
LOG_TAIL_LINES = 60
FIXTURES_README = "README.md"
_STEP_PREFIX = "ProfilerStep#"
# GPU-side categories: they run after the CPU launched them, so they are kept by correlation.
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_FLOW_PHASES = frozenset({"s", "f", "t"})
_COPIED_AS_IS = (MANIFEST_FILE, OBSERVATIONS_FILE, STEPS_FILE, COMPILE_FILE, PROCESSES_FILE)


@dataclass
class TrimReport:
    """What trim_run_dir kept, for the log line and the fixtures README."""

    files: dict[str, int] = field(default_factory=dict)  # name -> bytes as gzipped
    trace_events_in: int = 0
    trace_events_out: int = 0
    library_frames_dropped: int = 0
    samples_in: int = 0
    samples_out: int = 0
    memory_entries_dropped: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())


# --------------------------------------------------------------------------- trimming


def trim_run_dir(
    src: Path,
    dst: Path,
    *,
    budget_bytes: int = BUDGET_BYTES,
    keep_steps: int = KEEP_TRACE_STEPS,
    max_samples: int = MAX_SAMPLE_ROWS,
    max_memory_entries: int = MAX_MEMORY_ENTRIES,
    repo_root: Path = REPO_ROOT,
) -> TrimReport:
    """Copy the analysable part of child run directory `src` into `dst`, trimmed (see module doc).

    `dst` is emptied first. Paths under `repo_root` (in spec.json, the other records, trace
    frame names and snapshot frames) become relative to it, and `src` itself becomes `dst`.
    """
    if not (src / MANIFEST_FILE).is_file() and not (src / SPEC_FILE).is_file():
        raise ValueError(f"{src} is not a child run directory (no {MANIFEST_FILE})")
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    report = TrimReport()
    renamed: dict[str, str] = {}
    paths = _PathRewrite.of(src, dst, repo_root)
    # The child's own record, then every further training process's (ranks/<k>/).
    records = [(src, dst)] + [(path, rank_dir(dst, rank)) for rank, path in rank_dirs(src)]

    if (src / SPEC_FILE).is_file():
        spec = _relative_spec(read_json(src / SPEC_FILE), dst, repo_root)
        write_json(dst / SPEC_FILE, spec)
    for record_src, record_dst in records:
        record_dst.mkdir(parents=True, exist_ok=True)
        for name in _COPIED_AS_IS:
            if (record_src / name).is_file():
                (record_dst / name).write_text(paths.apply((record_src / name).read_text()))
        for name in (STDOUT_FILE, STDERR_FILE):
            if (record_src / name).is_file():
                text = (record_src / name).read_text(errors="replace")
                lines = text.splitlines()[-LOG_TAIL_LINES:]
                (record_dst / name).write_text("".join(line + "\n" for line in lines))
    if (src / SAMPLES_FILE).is_file():
        rows = list(read_jsonl(src / SAMPLES_FILE))
        kept = subsample_rows(rows, max_samples)
        report.samples_in, report.samples_out = len(rows), len(kept)
        (dst / SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in kept))
    if (src / MEMORY_SNAPSHOT_FILE).is_file():
        # The restricted loader the analysis uses: a snapshot holds plain values only.
        snapshot = load_snapshot(src / MEMORY_SNAPSHOT_FILE)
        snapshot, report.memory_entries_dropped = trim_snapshot(snapshot, max_memory_entries)
        snapshot = _relativize_snapshot_paths(snapshot, repo_root)
        (dst / MEMORY_SNAPSHOT_FILE).write_bytes(pickle.dumps(snapshot, protocol=4))

    user = UserCode(_user_roots(src, repo_root))
    for record_src, record_dst in records:
        for trace_path in find_traces(record_src)[:1]:  # later windows (repeats) add nothing
            data = _read_trace(trace_path)
            report.trace_events_in += len(data.get("traceEvents", []))
            data = relativize_frames(trim_trace_window(data, keep_steps), repo_root)
            others = _gzipped_size_of_dir(dst)
            payload = _gzip_json(data)
            if others + len(payload) > budget_bytes:
                data, dropped = drop_library_frames(data, user)
                report.library_frames_dropped += dropped
                payload = _gzip_json(data)
            report.trace_events_out += len(data.get("traceEvents", []))
            name = trace_path.name if trace_path.name.endswith(".gz") else trace_path.name + ".gz"
            if record_src == src:
                renamed[trace_path.name] = name
            (record_dst / name).write_bytes(payload)

    if (dst / MANIFEST_FILE).is_file():
        manifest = read_json(dst / MANIFEST_FILE)
        manifest["artifacts"] = _artifacts_present(manifest.get("artifacts", {}), dst, renamed)
        write_json(dst / MANIFEST_FILE, manifest)
    report.files = {
        p.relative_to(dst).as_posix(): _gzipped_size(p)
        for p in sorted(dst.rglob("*"))
        if p.is_file()
    }
    if report.total_bytes > budget_bytes:
        log.warning(
            "%s is %d KB gzipped, over the %d KB budget: record fewer or cheaper steps",
            dst,
            report.total_bytes // 1000,
            budget_bytes // 1000,
        )
    return report


def trim_trace_window(data: dict[str, Any], keep_steps: int = KEEP_TRACE_STEPS) -> dict[str, Any]:
    """Keep events overlapping the first `keep_steps` ProfilerStep spans; metadata always.

    Python frames that were already running when the window opened (the training loop, runpy)
    overlap it and stay, so every kept frame still has its callers. GPU work is kept when its
    launch (cuda_runtime / cuda_driver event) was kept, since kernels finish after their step's
    CPU span ends. A trace without ProfilerStep spans is returned unchanged.
    """
    events = data.get("traceEvents", [])
    steps = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X"
            and str(e.get("name", "")).startswith(_STEP_PREFIX)
            and e.get("cat") == "user_annotation"
        ),
        key=lambda e: float(e["ts"]),
    )[:keep_steps]
    if not steps:
        return data
    start = float(steps[0]["ts"])
    end = max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in steps)

    def overlaps(e: Mapping[str, Any]) -> bool:
        # Half-open [start, end): the next step's span may begin exactly where this one ends.
        ts = float(e.get("ts", start))
        return ts < end and (ts >= start or ts + float(e.get("dur", 0.0)) > start)

    kept: list[dict[str, Any]] = []
    launched: set[Any] = set()
    gpu: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for e in events:
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M" or "ts" not in e:
            kept.append(e)
        elif cat in _GPU_CATS:
            gpu.append(e)
        elif ph in _FLOW_PHASES:
            flows.append(e)
        elif overlaps(e):
            kept.append(e)
            if cat in _LAUNCH_CATS:
                launched.add((e.get("args") or {}).get("correlation"))
    launched.discard(None)
    for e in gpu:
        correlation = (e.get("args") or {}).get("correlation")
        if correlation in launched or (correlation is None and overlaps(e)):
            kept.append(e)
    for e in flows:
        # ac2g flows carry the launch's correlation id; fwdbwd flows are kept by position.
        keep = e.get("id") in launched if e.get("cat") == "ac2g" else overlaps(e)
        if keep:
            kept.append(e)
    return {**data, "traceEvents": kept}


def drop_library_frames(data: dict[str, Any], user: UserCode) -> tuple[dict[str, Any], int]:
    """Drop library Python frames that the analysis attributes nothing to.

    A frame of library code that holds no aten op and no user frame is dropped when either
    - its callers up to the nearest frame of the user's own code hold no aten op either
      (typically numpy and builtin calls inside a Dataset's __getitem__): its time then lands
      on that user frame, exactly where the analysis charged it before; or
    - it runs inside an aten op: Python called back from C++, such as the stack trace that
      anomaly mode captures for every autograd node (thousands of traceback.py frames a step).
    Every frame that contains an op - the ones syncs, copies and optimizer patterns are
    attributed through - stays. Kept frames whose caller was dropped get the nearest kept
    ancestor as `Python parent id`. Returns the new trace and the number of frames dropped.
    """
    events = data.get("traceEvents", [])
    anchors: dict[Any, list[float]] = defaultdict(list)  # tid -> start times of ops/user frames
    op_spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)  # tid -> (start, end)
    frames: dict[Any, dict[str, Any]] = {}  # Python id -> frame
    for e in events:
        cat = e.get("cat")
        if cat == "cpu_op":
            anchors[e.get("tid")].append(float(e["ts"]))
            op_spans[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + e.get("dur", 0.0)))
        elif cat == "python_function" and e.get("ph") == "X":
            py_id = (e.get("args") or {}).get("Python id")
            if py_id is not None:
                frames[py_id] = e
            if user.is_user_frame_name(str(e.get("name", ""))):
                anchors[e.get("tid")].append(float(e["ts"]))
    for times in anchors.values():
        times.sort()
    # Per thread: op start times, and the latest end of any op started at or before each one.
    op_starts: dict[Any, list[float]] = {}
    op_reach: dict[Any, list[float]] = {}
    for tid, spans in op_spans.items():
        spans.sort()
        op_starts[tid] = [start for start, _ in spans]
        reach, latest = [], float("-inf")
        for _, stop in spans:
            latest = max(latest, stop)
            reach.append(latest)
        op_reach[tid] = reach

    def is_user(e: Mapping[str, Any]) -> bool:
        return user.is_user_frame_name(str(e.get("name", "")))

    def holds_anchor(e: Mapping[str, Any]) -> bool:
        times = anchors.get(e.get("tid"), [])
        ts = float(e["ts"])
        i = bisect.bisect_left(times, ts)
        return i < len(times) and times[i] <= ts + float(e.get("dur", 0.0))

    def inside_op(e: Mapping[str, Any]) -> bool:
        starts = op_starts.get(e.get("tid"), [])
        i = bisect.bisect_right(starts, float(e["ts"])) - 1
        return i >= 0 and op_reach[e.get("tid")][i] >= float(e["ts"]) + float(e.get("dur", 0.0))

    # Whether the chain of callers above a frame reaches user code before any op-holding frame.
    reaches_user: dict[Any, bool] = {}

    def callers_reach_user(py_id: Any) -> bool:
        chain: list[Any] = []
        parent = (frames[py_id].get("args") or {}).get("Python parent id")
        result = False
        while parent in frames and parent not in reaches_user and len(chain) < len(frames):
            frame = frames[parent]
            if is_user(frame):
                result = True
                break
            if holds_anchor(frame) or _is_module_label(str(frame.get("name", ""))):
                break
            chain.append(parent)
            parent = (frame.get("args") or {}).get("Python parent id")
        else:
            result = reaches_user.get(parent, False)
        for link in chain:
            reaches_user[link] = result
        return result

    dropped_parent: dict[Any, Any] = {}
    for py_id, e in frames.items():
        name = str(e.get("name", ""))
        if is_user(e) or _is_module_label(name) or holds_anchor(e):
            continue
        if callers_reach_user(py_id) or inside_op(e):
            dropped_parent[py_id] = (e.get("args") or {}).get("Python parent id")
    if not dropped_parent:
        return data, 0

    def kept_ancestor(parent: Any) -> Any:
        seen = 0
        while parent in dropped_parent and seen < len(dropped_parent):
            parent = dropped_parent[parent]
            seen += 1
        return parent

    out: list[dict[str, Any]] = []
    for e in events:
        if e.get("cat") == "python_function" and e.get("ph") == "X":
            args = e.get("args") or {}
            if args.get("Python id") in dropped_parent:
                continue
            parent = args.get("Python parent id")
            if parent in dropped_parent:
                e = {**e, "args": {**args, "Python parent id": kept_ancestor(parent)}}
        out.append(e)
    return {**data, "traceEvents": out}, len(dropped_parent)


def relativize_frames(data: dict[str, Any], repo_root: Path) -> dict[str, Any]:
    """Python frame names under `repo_root` -> relative to it.

    That is how they read when perfdoctor and the scripts are found through `sys.path` (an
    installed perfdoctor), and it keeps the recording machine's paths out of the fixture.
    """
    prefix = str(repo_root.resolve()) + "/"
    events = [
        {**e, "name": e["name"][len(prefix) :]}
        if e.get("cat") == "python_function" and str(e.get("name", "")).startswith(prefix)
        else e
        for e in data.get("traceEvents", [])
    ]
    return {**data, "traceEvents": events}


def trim_snapshot(snapshot: Any, max_entries: int) -> tuple[Any, int]:
    """Keep the last `max_entries` history entries per device; segments stay whole."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        return snapshot, 0
    dropped = 0
    traces = []
    for device_trace in snapshot["device_traces"]:
        if isinstance(device_trace, list) and len(device_trace) > max_entries:
            dropped += len(device_trace) - max_entries
            device_trace = device_trace[-max_entries:]
        traces.append(device_trace)
    return {**snapshot, "device_traces": traces}, dropped


def subsample_rows(rows: Sequence[dict[str, Any]], max_rows: int) -> list[dict[str, Any]]:
    """Evenly spaced rows per sample kind (and GPU index), first and last kept; notes all kept."""
    notes = [r for r in rows if r.get("kind") == "note"]
    series: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("kind") != "note":
            series[(r.get("kind"), r.get("index"))].append(r)
    per_series = max(2, (max_rows - len(notes)) // max(1, len(series)))
    kept = list(notes)
    for group in series.values():
        if len(group) <= per_series:
            kept.extend(group)
            continue
        stride = (len(group) - 1) / (per_series - 1)
        kept.extend(group[round(i * stride)] for i in range(per_series))
    return sorted(kept, key=lambda r: float(r.get("t", 0.0)))


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _PathRewrite:
    """Absolute paths in a record's text -> the fixture's: the scratch run directory (also
    inside ranks' records and processes.json) -> the fixture's path, anything under the
    repository -> relative to it, the repository itself -> "."."""

    pairs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, src: Path, dst: Path, repo_root: Path) -> _PathRewrite:
        root = repo_root.resolve()
        dst_abs = dst.resolve()
        dst_text = (
            dst_abs.relative_to(root).as_posix() if dst_abs.is_relative_to(root) else str(dst)
        )
        runs = sorted({str(src.absolute()), str(src.resolve())}, key=len, reverse=True)
        pairs = [(run, dst_text) for run in runs]
        pairs += [(str(root) + "/", ""), (f'"{root}"', '"."')]
        return cls(tuple(pairs))

    def apply(self, text: str) -> str:
        for old, new in self.pairs:
            text = text.replace(old, new)
        return text


def _relativize_snapshot_paths(snapshot: Any, repo_root: Path) -> Any:
    """Frame filenames under `repo_root` -> relative, in segments' blocks and history."""
    prefix = str(repo_root.resolve()) + "/"

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: fix(v) for k, v in value.items()}
            name = out.get("filename")
            if isinstance(name, str) and name.startswith(prefix):
                out["filename"] = name[len(prefix) :]
            return out
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return fix(snapshot)


def _is_module_label(name: str) -> bool:
    # with_modules frames ("nn.Module: Linear_0") name the model structure, not a file.
    return name.startswith("nn.Module: ")


def _read_trace(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return json.loads(raw)


def _gzip_json(data: Mapping[str, Any]) -> bytes:
    # mtime=0: re-recording the same run gives the same bytes, so git sees no spurious change.
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0)


def _gzipped_size(path: Path) -> int:
    raw = path.read_bytes()
    return len(raw) if path.name.endswith(".gz") else len(gzip.compress(raw, mtime=0))


def _gzipped_size_of_dir(path: Path) -> int:
    return sum(_gzipped_size(p) for p in path.rglob("*") if p.is_file())


def _relative_spec(spec: dict[str, Any], dst: Path, repo_root: Path) -> dict[str, Any]:
    root = repo_root.resolve()

    def rel(value: Any) -> Any:
        if not isinstance(value, str) or not Path(value).is_absolute():
            return value
        try:
            return str(Path(value).resolve().relative_to(root)) or "."
        except ValueError:
            return value

    out = dict(spec)
    out["cwd"] = rel(spec.get("cwd"))
    dst_abs = dst.resolve()
    out["run_dir"] = str(dst_abs.relative_to(root)) if dst_abs.is_relative_to(root) else str(dst)
    target = dict(spec.get("target") or {})
    if "name" in target:
        target["name"] = rel(target["name"])
    out["target"] = target
    return out


def _user_roots(src: Path, repo_root: Path) -> list[Path]:
    """The script's directory and the run's cwd, as the analysis uses them."""
    roots: list[Path] = []
    if (src / SPEC_FILE).is_file():
        spec = read_json(src / SPEC_FILE)
        cwd = Path(spec.get("cwd") or repo_root)
        roots.append(cwd)
        target = spec.get("target") or {}
        if target.get("kind") == "script" and target.get("name"):
            roots.append((cwd / target["name"]).parent)
    return roots or [repo_root]


def _artifacts_present(
    artifacts: Mapping[str, str], dst: Path, renamed: Mapping[str, str]
) -> dict[str, str]:
    out = {}
    for key, name in artifacts.items():
        name = renamed.get(name, name)
        if (dst / name).is_file():
            out[key] = name
    return out


# --------------------------------------------------------------------------- recording


def record(
    script: Path,
    out: Path,
    script_args: Sequence[str] = (),
    *,
    plan: StepPlan = DEFAULT_PLAN,
    timeout_s: float = 600.0,
    seed: int = 0,
    env: Mapping[str, str] | None = None,
    nproc_per_node: int = 1,
) -> tuple[RunManifest, TrimReport]:
    """Run `script` under the launcher into a scratch directory, then trim it into `out`.

    `env`: extra environment of the child (kept in spec.json); `nproc_per_node` > 1 runs it
    under torchrun, as `perfdoctor profile --nproc-per-node` does."""
    from perfdoctor.collect.launcher import launch  # the live side: imports nothing of torch

    cwd = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="perfdoctor-fixture-") as scratch:
        run_dir = Path(scratch) / BASELINE_LABEL
        spec = RunSpec(
            label=BASELINE_LABEL,
            target=Target(kind="script", name=str(script), argv=tuple(script_args)),
            cwd=str(cwd),
            run_dir=str(run_dir),
            plan=plan,
            seed=seed,
            env=dict(env or {}),
        )
        manifest = launch(
            spec, timeout_s=timeout_s, echo_output=False, nproc_per_node=nproc_per_node
        )
        report = trim_run_dir(run_dir, out)
    return manifest, report


def readme_line(
    name: str,
    script: Path,
    manifest: RunManifest,
    plan: StepPlan,
    kb: int,
    how: Sequence[str] = (),
) -> str:
    """`how`: what else the recording was given (options, environment, script arguments)."""
    device = manifest.device.name if manifest.device else "unknown device"
    if manifest.device and manifest.device.kind == "cuda" and manifest.device.compute_capability:
        device += f" (sm {manifest.device.compute_capability})"
    elif manifest.device and manifest.device.cpu_cores_logical:
        device += f" ({manifest.device.cpu_cores_logical} cores)"
    torch_version = manifest.versions.get("torch", "unknown")
    day = dt.date.today().isoformat()
    given = f" (`{' '.join(how)}`)" if how else ""
    return (
        f"- `{name}`: `{script.as_posix()}`{given} on {device}, torch {torch_version}, "
        f"recorded {day}; "
        f"plan {plan.warmup_steps}+{plan.timed_steps}+{plan.profiled_steps} steps, status "
        f"{manifest.status}, {kb} KB gzipped."
    )


def update_readme(readme: Path, name: str, line: str) -> None:
    """One line per fixture, replaced when the fixture is recorded again."""
    header = (
        "# Recorded run directories\n\n"
        "Trimmed child run directories recorded from `sample_models/` by "
        "`tools/record_fixture.py`. One line each: what, on which device, with which torch, "
        "when.\n\n"
    )
    lines = readme.read_text().splitlines() if readme.is_file() else header.splitlines()
    prefix = f"- `{name}`:"
    lines = [entry for entry in lines if not entry.startswith(prefix)]
    lines.append(line)
    readme.write_text("\n".join(lines) + "\n")


def _split_script_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = list(argv).index("--")
        return list(argv[:cut]), list(argv[cut + 1 :])
    return list(argv), []


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    own, script_args = _split_script_args(argv)
    parser = argparse.ArgumentParser(
        description="Record a trimmed run directory from a sample model (see module docstring).",
        usage="%(prog)s SCRIPT --out DIR [--steps N] [--warmup N] [--profiled N] [-- ARGS...]",
    )
    parser.add_argument("script", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="fixture directory to write")
    parser.add_argument("--steps", type=int, default=DEFAULT_PLAN.timed_steps, help="timed steps")
    parser.add_argument("--warmup", type=int, default=DEFAULT_PLAN.warmup_steps)
    parser.add_argument("--profiled", type=int, default=DEFAULT_PLAN.profiled_steps)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds")
    parser.add_argument(
        "--nproc-per-node", type=int, default=1, help="ranks under torchrun (a multi-rank run)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment of the child, kept in spec.json (repeatable)",
    )
    parser.add_argument(
        "--allow-failure",
        action="store_true",
        help="keep the fixture when the script crashed (e.g. a CUDA OOM recording)",
    )
    return parser.parse_args(own), script_args


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, script_args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.script.is_file():
        log.error("no such script: %s", args.script)
        return 2
    plan = StepPlan(warmup_steps=args.warmup, timed_steps=args.steps, profiled_steps=args.profiled)
    bad = [item for item in args.env if "=" not in item]
    if bad:
        log.error("--env takes KEY=VALUE, not %s", bad[0])
        return 2
    env = dict(item.split("=", 1) for item in args.env)
    manifest, report = record(
        args.script,
        args.out,
        script_args,
        plan=plan,
        timeout_s=args.timeout,
        env=env,
        nproc_per_node=args.nproc_per_node,
    )
    ok = manifest.status in ("completed", "finished_early")
    log.info(
        "%s: status %s, %d steps; trace %d -> %d events (%d library frames dropped); %d KB gzipped",
        args.out,
        manifest.status,
        manifest.steps_seen,
        report.trace_events_in,
        report.trace_events_out,
        report.library_frames_dropped,
        report.total_bytes // 1000,
    )
    timed = sorted(
        # device_ms: the GPU's clock on CUDA recordings (the host only sees launches)
        float(row.get("device_ms") or row["wall_ms"])
        for row in read_jsonl(args.out / STEPS_FILE)
        if row.get("phase") == "timed" and row.get("wall_ms") is not None
    )
    if timed:
        # A shared machine can make one recording far noisier than the next: show it.
        p50, p90 = timed[len(timed) // 2], timed[min(len(timed) - 1, int(0.9 * len(timed)))]
        log.info("timed steps: p50 %.1f ms, p90 %.1f ms (p90/p50 %.2f)", p50, p90, p90 / p50)
    if not ok and not args.allow_failure:
        log.error("the run did not complete (%s): %s", manifest.status, manifest.error or "")
        return 1
    how = [f"{k}={v}" for k, v in env.items()]
    if args.nproc_per_node > 1:
        how += ["--nproc-per-node", str(args.nproc_per_node)]
    if script_args:
        how += ["--", *script_args]
    line = readme_line(args.out.name, args.script, manifest, plan, report.total_bytes // 1000, how)
    update_readme(args.out.parent / FIXTURES_README, args.out.name, line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
