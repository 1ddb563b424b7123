"""What `perfdoctor view RUN` shows: RUN (a session, the --out directory, a child run, a
rank directory or a trace file) -> the one trace file to serve and the run directory whose
steps.jsonl marks it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfdoctor.errors import BadRunDir, TargetNotFound
from perfdoctor.rundir import BASELINE_LABEL, STEPS_FILE, TRACE_SUFFIXES, find_traces

# A trace handed over by name: the profiler's own suffixes, and the plain JSON of other writers.
_TRACE_FILE_SUFFIXES = (*TRACE_SUFFIXES, ".json", ".json.gz")


@dataclass(frozen=True)
class ViewSource:
    # None: a run that recorded no trace (an in-process A/B run, --profile-steps 0): its
    # steps.jsonl is shown alone, on a timeline laid from the steps' wall times.
    trace: Path | None
    steps_dir: Path | None  # the run directory whose steps.jsonl marks the trace
    others: tuple[Path, ...] = ()  # further traces in the same run directory, not shown


def find_view_source(run: Path) -> ViewSource:
    from perfdoctor.diagnose import is_lone_child_run, resolve_session_dir

    path = run.resolve()
    if not path.exists():
        raise TargetNotFound(f"{run} does not exist")
    if path.is_file():
        if not path.name.endswith(_TRACE_FILE_SUFFIXES):
            raise BadRunDir(
                f"{run} is not a trace file (.pt.trace.json.gz, .json or .json.gz)",
                hint="give a session, a run directory or a trace file",
            )
        return ViewSource(path, _steps_dir(path.parent))
    traces = find_traces(path)
    if traces:  # a child run or a rank directory (ranks/<k>/)
        return _newest(traces, path)
    if _steps_dir(path) is not None and not (path / BASELINE_LABEL).is_dir():
        return ViewSource(None, path)  # a run without a trace: its steps alone
    session = resolve_session_dir(path)
    run_dir = session if is_lone_child_run(session) else session / BASELINE_LABEL
    traces = find_traces(run_dir) if run_dir.is_dir() else []
    if traces:
        return _newest(traces, run_dir)
    if run_dir.is_dir() and _steps_dir(run_dir) is not None:
        return ViewSource(None, run_dir)
    raise BadRunDir(
        f"no profiler trace and no steps.jsonl in {run_dir}",
        hint="the run recorded neither (it stopped before its first step); "
        "`perfdoctor profile` records a trace by default",
    )


def _newest(traces: list[Path], run_dir: Path) -> ViewSource:
    # The last written (names end in the export's time, but not zero-padded: 9 > 1795...).
    newest = max(traces, key=lambda p: (p.stat().st_mtime_ns, p.name))
    others = tuple(p for p in traces if p != newest)
    return ViewSource(newest, _steps_dir(run_dir), others)


def _steps_dir(run_dir: Path) -> Path | None:
    return run_dir if (run_dir / STEPS_FILE).is_file() else None
