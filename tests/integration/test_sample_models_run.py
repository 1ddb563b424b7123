"""Every sample model trains when run plainly (`python sample_models/x.py`), briefly.

Each script runs for 10 steps with small sizes as `__main__` with its own argv, and the
tests read the losses it logged: the script must stop at the step budget, and its loss must
be finite and lower at the end than at the start. perfdoctor's diagnoses of these scripts are
tested elsewhere; this only proves they are real, working training scripts.

One child process imports torch once and runs each script in a fork of itself (its own
process, exit code and output file: forked_scripts.py), so the four scripts pay for one torch
import, not four.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple

import pytest
from forked_scripts import run_forked

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


class SampleRun(NamedTuple):
    returncode: int
    output: str


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SampleRun]:
    outputs = tmp_path_factory.mktemp("samples")
    scripts = sorted(SMALL_ARGS)
    jobs = [
        (
            SAMPLES / script,
            ["--device", "cpu", "--max-steps", str(STEPS), "--log-every", "1", *SMALL_ARGS[script]],
            outputs / f"{script}.log",
        )
        for script in scripts
    ]
    # One intra-op thread: with two on a busy 2-core machine (the suite's two workers are
    # enough) each small op of these small models waits at a barrier.
    ran = run_forked(jobs, env={"OMP_NUM_THREADS": "1"}, timeout_s=300)
    return {
        script: SampleRun(code, output) for script, (code, output) in zip(scripts, ran, strict=True)
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
