"""HolisticTraceAnalysis on one trace directory, run by analysis_scale.py in HTA's own venv.

    <hta-venv>/bin/python benchmarks/_hta_one.py TRACE_DIR

TraceAnalysis(trace_dir=...) parses every trace in the directory; get_temporal_breakdown()
is HTA's closest equivalent of perfdoctor's per-step facts (GPU idle / compute / non-compute
time). Prints one JSON object with the seconds of each, or the error that stopped it. This
file must not import perfdoctor: HTA's venv does not have it.
"""

from __future__ import annotations

import json
import logging
import sys
import time


def main() -> int:
    logging.disable(logging.WARNING)  # HTA logs every parse step at INFO/WARNING
    result: dict[str, object] = {}
    start = time.perf_counter()
    try:
        from hta.trace_analysis import TraceAnalysis

        imported = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=sys.argv[1])
        parsed = time.perf_counter()
        result["parse_s"] = parsed - imported
        analysis.get_temporal_breakdown(visualize=False)
        result["breakdown_s"] = time.perf_counter() - parsed
        result["total_s"] = time.perf_counter() - imported
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
        result["failed_after_s"] = time.perf_counter() - start
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
