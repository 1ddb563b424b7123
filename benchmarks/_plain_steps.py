"""The "plain" arm of benchmarks/overhead.py: a script run as `python script.py`, timed.

    python benchmarks/_plain_steps.py OUT.json script.py [script args...]

The only instrumentation is one global optimizer step post-hook that appends
`time.perf_counter()` to a list (about 1 us per step), so a step's time here is the
interval between two consecutive optimizer steps: the same period perfdoctor's steps.jsonl
reports (its steps start at the first DataLoader fetch / forward after a step; consecutive
boundaries are one iteration apart either way).

The script runs as `python script.py` would run it (sys.argv, sys.path[0], `__main__`,
`__file__`), and from this module's top level, not from inside a function: the script's
frames then sit one level deeper than under plain python, not five. That matters with
anomaly mode on, which records the Python stack of every autograd node: each extra frame
costs about 25 us per step on tabular_mlp_debug here.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import json
import os
import sys
import time
import types

import torch.optim.optimizer as optimizer_mod

out_path, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
path = os.path.abspath(script)
ends: list[float] = []
now = time.perf_counter
optimizer_mod.register_optimizer_step_post_hook(lambda opt, a, k: ends.append(now()))

sys.argv = [script, *args]
sys.path[0] = os.path.dirname(path)
with open(path, "rb") as fh:
    code = compile(fh.read(), path, "exec", dont_inherit=True)
module = types.ModuleType("__main__")
module.__dict__.update(
    {
        "__file__": path,
        "__cached__": None,
        "__loader__": importlib.machinery.SourceFileLoader("__main__", path),
        "__package__": None,
        "__spec__": None,
        "__builtins__": builtins,
    }
)
harness = sys.modules["__main__"]
sys.modules["__main__"] = module
exit_code = 0
try:
    exec(code, module.__dict__)
except SystemExit as exc:
    exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
finally:
    sys.modules["__main__"] = harness
with open(out_path, "w") as fh:
    json.dump({"step_ends_s": ends, "exit_code": exit_code}, fh)
sys.exit(exit_code)
