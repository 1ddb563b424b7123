"""Where the shared GPU corpus lives: $PERFDOCTOR_GPU_CORPUS, or ../shared/gpu-corpus beside
the checkout. Tests that read it skip when it is absent (it is never copied into the repo).

`parsed_trace` and `trace_summary` parse and summarise each corpus trace once per test session: the
corpus and oracle tests read the same large files (50 MB of JSON) for several checks.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from perfdoctor.analyze.trace import TraceSummary, summarize_trace
from perfdoctor.analyze.trace_events import Table, TraceEvents, parse_trace

REPO = Path(__file__).resolve().parents[3]


def corpus_dir() -> Path | None:
    env = os.environ.get("PERFDOCTOR_GPU_CORPUS")
    for candidate in (Path(env) if env else None, REPO.parent / "shared" / "gpu-corpus"):
        if candidate is not None and (candidate / "traces").is_dir():
            return candidate
    return None


def corpus_traces() -> list[Path]:
    root = corpus_dir()
    if root is None:
        return []
    return sorted(p for p in (root / "traces").iterdir() if p.name.endswith((".json", ".gz")))


@functools.cache
def parsed_trace(path: Path) -> TraceEvents:
    """parse_trace(path) (whole-file decode), shared by the tests of the session. Its arrays
    are made read-only, so an analysis that wrote into them fails instead of changing what
    the next test reads."""
    events = parse_trace(path)
    for value in vars(events).values():
        if isinstance(value, Table):
            for arr in (value.name, value.ts, value.dur, value.tid, *value.extra.values()):
                arr.flags.writeable = False
    return events


@functools.cache
def trace_summary(path: Path) -> TraceSummary:
    """summarize_trace(parsed_trace(path)): what load_trace(path) gives."""
    return summarize_trace(parsed_trace(path))
