"""manifest.json of one child run: what the launcher saw (how the child ended) and what the
child wrote (observations.json, steps, traces), read into one RunManifest. It is written
whatever happened, also when the child's artifacts cannot be read.
"""

from __future__ import annotations

import json
import logging
import platform
import signal
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from perfdoctor import __version__
from perfdoctor.collect.supervision import ChildOutcome
from perfdoctor.errors import EXIT_MISSING_TOOL, EXIT_TIMEOUT, one_line_message
from perfdoctor.model import AppliedOptimization, DeviceInfo, RunManifest, RunSpec, RunStatus
from perfdoctor.run_schema import RUN_SCHEMA_VERSION
from perfdoctor.rundir import (
    MANIFEST_FILE,
    MEMORY_SNAPSHOT_FILE,
    OBSERVATIONS_FILE,
    PROGRESS_FILE,
    SAMPLES_FILE,
    SPEC_FILE,
    STDERR_FILE,
    STDOUT_FILE,
    STEPS_FILE,
    find_traces,
    read_json,
    read_jsonl,
    write_json,
)

logger = logging.getLogger(__name__)

_STEP_DETECTIONS = ("optimizer", "backward", "time")


def write_manifest(
    spec: RunSpec,
    run_dir: Path,
    outcome: ChildOutcome,
    steps_reported: int,
    adjust: Callable[[RunManifest], RunManifest] | None = None,
) -> RunManifest:
    """`adjust`: a multi-rank run's status follows its first failing rank (collect/ranks.py)."""
    try:
        manifest = _assemble_manifest(spec, run_dir, outcome, steps_reported)
    except Exception:
        # A bug in reading the child's artifacts must not cost the manifest itself.
        logger.exception("could not read the child's artifacts; writing a minimal manifest")
        status, exit_code, error = _classify(outcome, None, steps_reported)
        manifest = RunManifest(
            label=spec.label,
            status=status,
            exit_code=exit_code,
            wall_s=round(outcome.wall_s, 3),
            steps_seen=steps_reported,
            step_detection=None,
            plan_complete=False,
            error=error,
        )
    if adjust is not None:
        manifest = adjust(manifest)
    manifest = replace(manifest, schema_version=RUN_SCHEMA_VERSION)
    write_json(run_dir / MANIFEST_FILE, manifest)
    return manifest


def _assemble_manifest(
    spec: RunSpec, run_dir: Path, outcome: ChildOutcome, steps_reported: int
) -> RunManifest:
    observations = _read_observations(run_dir)
    step_rows = sum(1 for _ in read_jsonl(run_dir / STEPS_FILE))
    reported = observations.get("steps_seen") if observations else None
    steps_seen = max(step_rows, steps_reported, reported if isinstance(reported, int) else 0)
    status, exit_code, error = _classify(outcome, observations, steps_seen)
    obs = observations or {}
    detection = obs.get("step_detection")
    plan_complete = bool(
        obs.get("stopped_by_perfdoctor")
        or obs.get("plan_complete")
        or steps_seen >= spec.plan.total_steps
    )
    warnings = [str(w) for w in _as_list(obs.get("warnings"))] + outcome.warnings
    warnings += collector_failures(spec, obs, run_dir, status)
    if outcome.timed_out:
        warnings.append("the script ran past the timeout and was stopped")
    return RunManifest(
        label=spec.label,
        status=status,
        exit_code=exit_code,
        wall_s=round(outcome.wall_s, 3),
        steps_seen=steps_seen,
        step_detection=detection if detection in _STEP_DETECTIONS else None,
        plan_complete=plan_complete,
        versions=_versions(obs),
        device=_device(obs),
        artifacts=_artifacts(run_dir),
        applied=_applied(obs),
        warnings=tuple(warnings),
        error=error,
        stopped_at=_stopped_at(obs),
        steps_run=_steps_run(spec, obs, detection),
    )


def _steps_run(spec: RunSpec, obs: Mapping[str, Any], detection: object) -> int | None:
    """--run-to-end: the steps the script ran in all. The step rows stop at the plan's end;
    the optimizer hooks count every optimizer.step to the script's end, which is the step
    count where steps are counted by the optimizer (each optimizer steps once per step)."""
    if not spec.run_to_end or detection != "optimizer":
        return None
    counts = [o.get("steps") for o in _as_list(obs.get("optimizers")) if isinstance(o, Mapping)]
    counted = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    return max(counted) if counted else None


def _stopped_at(obs: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where the child stopped the script (bootstrap._stop_point); a stop seen without one
    (a sub-process's record) still says that the script was stopped."""
    if not obs.get("stopped_by_perfdoctor"):
        return None
    point = obs.get("stopped_at")
    return dict(point) if isinstance(point, Mapping) else {}


# What a failing collector costs the report, by its key in observations.json.
_COLLECTOR_LOSS = {
    "profiler": "no profiler trace for this run: the rules that need one are skipped",
    "memory_history": "no CUDA memory history for this run",
}


def collector_failures(
    spec: RunSpec, obs: Mapping[str, Any], run_dir: Path, status: RunStatus
) -> list[str]:
    """One warning per collector that failed in the child (its section of observations.json
    holds an "error"), and one when the profiler was asked for and no trace came back. A
    failing collector never fails the run, so without these the report would read complete.
    """
    warnings = []
    for key, section in obs.items():
        if isinstance(section, Mapping) and section.get("error"):
            loss = _COLLECTOR_LOSS.get(key, "its observations are missing from this run")
            warnings.append(f"{key} failed: {_one_line(section['error'])} ({loss})")
    profiler = obs.get("profiler")
    profiler_failed = isinstance(profiler, Mapping) and bool(profiler.get("error"))
    user_profiled = isinstance(profiler, Mapping) and profiler.get("user_profiler")
    if (
        spec.profile
        and status == "completed"
        and not profiler_failed
        and not user_profiled
        and not find_traces(run_dir)
    ):
        warnings.append(
            "the profiler window ran but wrote no trace: the rules that need one are skipped"
        )
    return warnings + _sampler_failures(run_dir)


# The notes SamplingThread writes when a sampler fails (collect/sampling.py); "NVML
# unavailable" on a machine without a GPU is expected and not among them.
_SAMPLER_FAILURE_NOTES = ("sampler could not start", "sampler stopped")


def _sampler_failures(run_dir: Path) -> list[str]:
    warnings = []
    try:
        with (run_dir / SAMPLES_FILE).open("rb") as fh:
            lines = [line for line in fh if b'"note"' in line]
    except OSError:
        return []
    for line in lines:
        try:
            message = str(json.loads(line).get("message", ""))
        except (ValueError, AttributeError):
            continue
        if message.endswith(_SAMPLER_FAILURE_NOTES):
            warnings.append(f"{message}: the device samples of this run are incomplete")
    return warnings


def _classify(
    outcome: ChildOutcome, observations: dict[str, Any] | None, steps_seen: int
) -> tuple[RunStatus, int, str | None]:
    """(status, exit code, one-line error) from how the child ended and what it wrote."""
    obs = observations or {}
    script_error = _one_line(obs.get("error"))
    if outcome.spawn_error is not None:
        error = f"could not start the child: {outcome.spawn_error}"
        return "launch_failed", EXIT_MISSING_TOOL, error
    if outcome.interrupted:
        return "interrupted", outcome.interrupt_code, outcome.internal_error or script_error
    if outcome.timed_out:
        return "timeout", EXIT_TIMEOUT, script_error
    code = outcome.exit_code if outcome.exit_code is not None else 1
    if code < 0:  # killed by a signal nobody in perfdoctor sent (OOM killer, kill -9, ...)
        name = _signal_name(-code)
        error = f"killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
        status: RunStatus = "script_crashed" if observations or steps_seen else "launch_failed"
        return status, 128 - code, error
    if obs.get("launch_error"):
        return "launch_failed", code or 1, _one_line(obs.get("launch_error"))
    if code == 0:
        # The plan done: perfdoctor stopped the script, or it ran on to its end (--run-to-end).
        done = obs.get("stopped_by_perfdoctor") or obs.get("plan_complete")
        status = "completed" if done else "finished_early"
        return status, 0, None
    if observations is None and steps_seen == 0:
        # The child died before the bootstrap got going (broken environment, import error).
        return "launch_failed", code, _last_error_line(outcome.stderr_tail)
    if script_error is not None:
        return "script_crashed", code, script_error
    if observations is None and _has_traceback(outcome.stderr_tail):
        return "script_crashed", code, _last_error_line(outcome.stderr_tail)
    return "script_exited", code, None


def _read_observations(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = read_json(run_dir / OBSERVATIONS_FILE)
    except (OSError, ValueError):
        return None  # missing, or torn by a killed child
    return data if isinstance(data, dict) else None


def _versions(obs: Mapping[str, Any]) -> dict[str, str]:
    versions: dict[str, str] = {}
    reported = obs.get("versions")
    if isinstance(reported, Mapping):
        versions.update({str(k): str(v) for k, v in reported.items() if v is not None})
    torch_info = obs.get("torch")
    if "torch" not in versions and isinstance(torch_info, Mapping) and torch_info.get("version"):
        versions["torch"] = str(torch_info["version"])
    versions.setdefault("python", platform.python_version())
    versions.setdefault("perfdoctor", __version__)
    return versions


def _device(obs: Mapping[str, Any]) -> DeviceInfo | None:
    device = obs.get("device")
    if not isinstance(device, Mapping) or device.get("kind") not in ("cpu", "cuda"):
        return None
    known = {f.name for f in fields(DeviceInfo)}
    values = {k: v for k, v in device.items() if k in known}
    values.setdefault("name", "")
    cpu = obs.get("cpu")
    if isinstance(cpu, Mapping):
        values.setdefault("cpu_cores_logical", cpu.get("logical_cores"))
        values.setdefault("cpu_cores_physical", cpu.get("physical_cores"))
    try:
        return DeviceInfo(**values)
    except TypeError:
        return None


def _applied(obs: Mapping[str, Any]) -> tuple[AppliedOptimization, ...]:
    applied = []
    for entry in _as_list(obs.get("applied")):
        if not isinstance(entry, Mapping) or "id" not in entry:
            continue
        applied.append(
            AppliedOptimization(
                id=str(entry["id"]),
                applied=bool(entry.get("applied")),
                verified=bool(entry.get("verified")),
                detail=str(entry.get("detail", "")),
            )
        )
    return tuple(applied)


def _artifacts(run_dir: Path) -> dict[str, str]:
    """Artifact id -> path relative to the run directory, for the files that exist."""
    named = {
        "spec": SPEC_FILE,
        "observations": OBSERVATIONS_FILE,
        "steps": STEPS_FILE,
        "progress": PROGRESS_FILE,
        "samples": SAMPLES_FILE,
        "stdout": STDOUT_FILE,
        "stderr": STDERR_FILE,
        "memory_snapshot": MEMORY_SNAPSHOT_FILE,
    }
    found = {key: name for key, name in named.items() if (run_dir / name).is_file()}
    for number, trace in enumerate(find_traces(run_dir), start=1):
        found["trace" if number == 1 else f"trace-{number}"] = trace.name
    return found


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _one_line(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, Mapping):
        kind, message = value.get("type"), value.get("message")
        value = f"{kind}: {message}" if kind else message
    return one_line_message(str(value)) or None


def _has_traceback(lines: tuple[str, ...]) -> bool:
    return any(line.startswith("Traceback (most recent call last)") for line in lines)


def _last_error_line(lines: tuple[str, ...]) -> str | None:
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
