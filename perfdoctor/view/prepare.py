"""RUN -> everything the view server answers with, read once before it starts."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from perfdoctor.view.markers import BLOCKS_TID, Markers, build_markers
from perfdoctor.view.server import ViewSite, build_site
from perfdoctor.view.source import ViewSource, find_view_source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedView:
    source: ViewSource
    markers: Markers
    site: ViewSite


def prepare_view(run: Path) -> PreparedView:
    """Find the viewer first (a missing plugin is said before any trace is read), then the
    trace, its markers, and the pages."""
    from perfdoctor.analyze.trace_events import read_trace_bytes
    from perfdoctor.view.assets import (
        POLYFILL_FILE,
        find_viewer,
        index_page,
        offline_embedding,
    )
    from perfdoctor.view.document import splice_events

    viewer = find_viewer()
    source = find_view_source(run)
    markers = trace_markers(source)
    if source.trace is None:
        trace = json.dumps(
            {"traceEvents": list(markers.events), "displayTimeUnit": "ms"}, allow_nan=False
        ).encode()
    else:
        trace = splice_events(
            read_trace_bytes(source.trace), markers.events, name=str(source.trace)
        )
    embedding = offline_embedding(viewer.embedding.read_text(encoding="utf-8"))
    site = build_site(
        index_page(_title(source), markers.note),
        embedding,
        viewer.viewer,
        POLYFILL_FILE,
        trace,
    )
    return PreparedView(source, markers, site)


def trace_markers(source: ViewSource) -> Markers:
    """perfdoctor's step records beside the trace, placed on its ProfilerStep spans."""
    from perfdoctor.analyze.trace_events import parse_trace
    from perfdoctor.analyze.trace_index import find_steps
    from perfdoctor.errors import PerfdoctorError
    from perfdoctor.run_schema import SchemaMismatch
    from perfdoctor.rundir import read_steps

    if source.steps_dir is None:
        return build_markers([], {})
    try:
        steps = read_steps(source.steps_dir).steps
    except (SchemaMismatch, OSError) as err:
        log.warning("steps.jsonl of %s not read: %s", source.steps_dir, err)
        return Markers((), f"steps.jsonl of {source.steps_dir} could not be read: no markers")
    if source.trace is None:
        alone = build_markers(steps, {}, origin_us=0.0)
        blocks = sum(1 for e in alone.events if e["tid"] == BLOCKS_TID and e["ph"] == "X")
        return Markers(
            alone.events,
            f"no profiler trace in this run: its {len(steps)} steps"
            + (f" and {blocks} A/B blocks" if blocks else "")
            + " alone, laid from their wall times",
        )
    try:
        found = find_steps(parse_trace(source.trace))
    except PerfdoctorError as err:
        # The viewer may still open what our parser refuses: serve it, without markers.
        log.warning("%s", err)
        return Markers((), f"the trace could not be parsed for step spans ({err}): no markers")
    recorded = {
        n: (float(start), float(end - start))
        for n, start, end in zip(found.numbers, found.starts, found.ends, strict=True)
    }
    return build_markers(steps, recorded)


def _title(source: ViewSource) -> str:
    if source.trace is None:
        assert source.steps_dir is not None
        return f"{source.steps_dir.parent.name}/{source.steps_dir.name}: steps.jsonl"
    run = source.steps_dir or source.trace.parent
    return f"{run.parent.name}/{run.name}: {source.trace.name}"
