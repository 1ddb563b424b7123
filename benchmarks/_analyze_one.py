"""One measurement of benchmarks/analysis_scale.py, in a fresh process (peak RSS is its own).

    python benchmarks/_analyze_one.py facts RUN_DIR   load_run + derive_facts (a report's input)
    python benchmarks/_analyze_one.py parse TRACE     the trace decoder alone
    python benchmarks/_analyze_one.py idle            the imports alone (the RSS floor)

Prints one JSON object: seconds of the measured call, and what it found. The imports are
done before the clock starts, so the figure is the analysis, not Python's start-up.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (puts the checkout on sys.path)

from perfdoctor.analyze.facts import derive_facts
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.trace_events import parse_trace


def main() -> int:
    mode = sys.argv[1]
    result: dict[str, object] = {"mode": mode}
    start = time.perf_counter()
    if mode == "facts":
        record = load_run(Path(sys.argv[2]))
        facts = derive_facts(record)
        result["seconds"] = time.perf_counter() - start
        result["trace_steps"] = record.trace.steps if record.trace else None
        result["facts_measured"] = sum(v is not None for v in facts.values.values())
        result["gpu_busy_frac"] = facts.get("gpu_busy_frac")
    elif mode == "parse":
        events = parse_trace(Path(sys.argv[2]))
        result["seconds"] = time.perf_counter() - start
        result["cpu_ops"] = len(events.cpu_ops)
        result["python"] = len(events.python)
        result["gpu"] = len(events.gpu)
    elif mode == "idle":
        result["seconds"] = time.perf_counter() - start
    else:
        raise SystemExit(f"unknown mode {mode}")
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
