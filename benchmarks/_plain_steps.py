"""The "plain" arm of benchmarks/overhead.py: a script run as `python script.py`, timed.

    python benchmarks/_plain_steps.py OUT.json script.py [script args...]

The only instrumentation is one global optimizer step post-hook that appends
`time.perf_counter()` to a list (about 1 us per step), so a step's time here is the
interval between two consecutive optimizer steps: the same period perfdoctor's steps.jsonl
reports (its steps start at the first DataLoader fetch / forward after a step; consecutive
boundaries are one iteration apart either way). The script is executed with the same steps
runpy takes (perfdoctor.collect.script_runner, which imports no torch), so sys.argv,
sys.path[0] and `__main__` are what plain `python script.py` gives it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# This file lives in benchmarks/; the script runner is perfdoctor's own (no torch import).
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    out_path = Path(sys.argv[1])
    script, args = sys.argv[2], sys.argv[3:]

    import torch.optim.optimizer as optimizer_mod

    from perfdoctor.collect import script_runner
    from perfdoctor.model import Target

    ends: list[float] = []
    now = time.perf_counter
    optimizer_mod.register_optimizer_step_post_hook(lambda opt, a, k: ends.append(now()))
    resolved = script_runner.resolve(Target("script", script, tuple(args)), str(Path.cwd()))
    code = 0
    try:
        script_runner.run(resolved)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out_path.write_text(json.dumps({"step_ends_s": ends, "exit_code": code}))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
