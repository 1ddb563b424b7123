"""Plain scripts (no perfdoctor) run as `python script argv` would run them, each in a fork of
one child process that imported torch once: N scripts pay for one `import torch` (about 2 s of
CPU on a quiet 2-core machine), not N. Each fork is its own process with its own exit code
and output file, run one after the other in the order given (so alternated A/B orders stay
alternated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from load_limits import scaled

# Runs each (script, argv, cwd, output file) of the JSON list in argv[1] as `python script
# argv` would, in a fork of this process, and prints {index: exit code} as JSON.
FORKING_RUNNER = """
import json, os, runpy, sys, traceback
import torch  # imported once; every fork below has it already

codes = {}
for index, (script, argv, cwd, output) in enumerate(json.loads(sys.argv[1])):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(cwd)
        sys.argv = [script, *argv]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        code = 0
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    codes[index] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(codes))
"""


def run_forked(
    jobs: Sequence[tuple[Path, Sequence[str], Path]],
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300,
) -> list[tuple[int, str]]:
    """(exit code, stdout and stderr together) of each (script, argv, output file) job, in
    order; each script runs in the directory of its output file. `env` is added to this
    process's environment for the runner (and so for every fork)."""
    spec = [
        (str(script), [str(a) for a in argv], str(Path(output).parent), str(output))
        for script, argv, output in jobs
    ]
    runner = subprocess.run(
        [sys.executable, "-c", FORKING_RUNNER, json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=scaled(timeout_s),
        check=False,
    )
    assert runner.returncode == 0, runner.stdout + runner.stderr
    codes = json.loads(runner.stdout.strip().splitlines()[-1])
    return [(codes[str(i)], Path(output).read_text()) for i, (_, _, output) in enumerate(jobs)]
