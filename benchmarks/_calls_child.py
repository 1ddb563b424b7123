"""perfdoctor's child under cProfile: how many of perfdoctor's function calls a step costs.

    python benchmarks/_calls_child.py OUT.json RUN_DIR/spec.json

Runs the child exactly as perfdoctor runs it (bootstrap.main, no parent) with cProfile on
from the first timed step to the end of the plan (set-up, warm-up, discovery and the
end's observations stay out), and writes per function: calls and own seconds, keyed
"file:function", for perfdoctor's own functions and for the torch function its hooks call
(`torch.compiler.is_compiling`). Used by `overhead.py --calls`, which runs two plans of
different lengths and divides the difference by the difference in steps: the calls one
more step costs, exactly, whatever the set-up and the end cost. Never used by perfdoctor.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys

import _common  # noqa: F401  (puts the checkout on sys.path)

WATCHED = ("perfdoctor" + os.sep, "is_compiling")


def main() -> None:
    out_path, spec_path = sys.argv[1], sys.argv[2]
    from perfdoctor.collect import bootstrap
    from perfdoctor.collect.probes import Probes

    profiler = cProfile.Profile()
    step_started, plan_finished = Probes.step_started, Probes.plan_finished

    def started(self: Probes, index: int) -> None:
        step_started(self, index)
        if index == self.plan.warmup:
            profiler.enable()

    def finished(self: Probes) -> None:
        profiler.disable()
        plan_finished(self)

    Probes.step_started = started  # type: ignore[method-assign]
    Probes.plan_finished = finished  # type: ignore[method-assign]
    code = 0
    try:
        code = bootstrap.main([spec_path])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        profiler.disable()
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        rows = {}
        for (filename, _line, name), (_cc, calls, tottime, _ct, _callers) in stats.items():
            if any(w in filename or w in name for w in WATCHED):
                short = filename.split("perfdoctor" + os.sep, 1)[-1]
                key = f"{short}:{name}"
                prev = rows.get(key, (0, 0.0))
                rows[key] = (prev[0] + calls, prev[1] + tottime)
        with open(out_path, "w") as fh:
            json.dump(rows, fh)
    sys.exit(code)


if __name__ == "__main__":
    main()
