"""Every sample model trains when run plainly (`python sample_models/x.py`), briefly.

Each script runs for 10 steps with small sizes as `__main__` with its own argv, and the
tests read the losses it logged: the script must stop at the step budget, and its loss must
be finite and lower at the end than at the start. perfdoctor's diagnoses of these scripts are
tested elsewhere; this only proves they are real, working training scripts.

One child process imports torch once and runs each script in a fork of itself (its own
process, exit code and output file), so the four scripts pay for one torch import, not four.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from load_limits import scaled

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
STEPS = 10
# Small sizes keep each run to a few seconds on 2 CPU cores; the inefficiency stays in place.
SMALL_ARGS = {
    "cnn_slow_dataloader.py": ["--samples", "640", "--batch-size", "32", "--lr", "3e-3"],
    "gpt_char_lm.py": ["--batch-size", "16", "--layers", "2", "--embed", "64"],
    "tabular_mlp_debug.py": ["--rows", "8192", "--val-rows", "512", "--eval-every", "3"],
    "tuned_mlp.py": ["--rows", "8192", "--val-rows", "512", "--eval-every", "5"],
}
LOSS = re.compile(r"step (\d+) loss ([-+0-9.eEnaif]+)")
SUMMARY = re.compile(r"^(\d+) steps in [0-9.]+ s", re.MULTILINE)


# Runs each (script, argv, output file) of the JSON list in argv[1] as `python script argv`
# would, in a fork of this process, and prints {script: exit code} as JSON.
FORKING_RUNNER = """
import json, os, runpy, sys, traceback
import torch  # imported once; every fork below has it already

codes = {}
for script, argv, output in json.loads(sys.argv[1]):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.argv = [script, *argv]
        sys.path[0] = os.path.dirname(script)
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
    codes[script] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(codes))
"""


class SampleRun(NamedTuple):
    returncode: int
    output: str


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SampleRun]:
    outputs = tmp_path_factory.mktemp("samples")
    jobs = [
        (
            str(SAMPLES / script),
            ["--device", "cpu", "--max-steps", str(STEPS), "--log-every", "1", *args],
            str(outputs / f"{script}.log"),
        )
        for script, args in sorted(SMALL_ARGS.items())
    ]
    runner = subprocess.run(
        [sys.executable, "-c", FORKING_RUNNER, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=False,
    )
    assert runner.returncode == 0, runner.stdout + runner.stderr
    codes = json.loads(runner.stdout.strip().splitlines()[-1])
    return {
        Path(script).name: SampleRun(codes[script], Path(output).read_text())
        for script, _, output in jobs
    }


@pytest.mark.parametrize("script", sorted(SMALL_ARGS))
def test_sample_trains_and_stops_at_the_step_budget(
    script: str, sample_runs: dict[str, SampleRun]
) -> None:
    result = sample_runs[script]
    output = result.output
    assert result.returncode == 0, output

    logged = [(int(step), float(loss)) for step, loss in LOSS.findall(output)]
    assert [step for step, _ in logged] == list(range(1, STEPS + 1)), output
    losses = [loss for _, loss in logged]
    assert all(math.isfinite(loss) for loss in losses), losses
    # Per-batch losses are noisy: compare the mean of the first and last three steps.
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < first, losses

    summary = SUMMARY.search(output)
    assert summary is not None, output
    assert int(summary.group(1)) == STEPS


def test_every_sample_model_is_covered() -> None:
    scripts = {p.name for p in SAMPLES.glob("*.py")}
    assert scripts == set(SMALL_ARGS)
