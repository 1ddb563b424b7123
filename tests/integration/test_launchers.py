"""Training started through other launchers: `accelerate launch` wrapping (2 gloo ranks on
CPU). (Hogwild trainers under multiprocessing's forkserver: test_process_tree.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import profile_in_process
from load_limits import scaled
from test_process_tree import assert_nothing_left, processes

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "scripts"
PLAN = ["--steps", "4", "--warmup", "1", "--profile-steps", "0", "--no-apply", "--quiet"]
WAIT_S = 180


def profile(tmp: Path, *target: str) -> dict[str, Any]:
    runs = tmp / "runs"
    proc = profile_in_process(
        "--out", runs, "--timeout", f"{scaled(WAIT_S):.0f}", *PLAN, *target,
        cwd=tmp,
        env={"HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    session = (runs / "latest").resolve()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_nothing_left(session)
    return {
        "baseline": session / "baseline",
        "report": json.loads((session / "report.json").read_text()),
    }


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate is not installed")
def test_a_wrapped_accelerate_launch_profiles_both_ranks(tmp_path: Path) -> None:
    # accelerate 1.x: `--cpu` runs one process whatever --num_processes says; several
    # processes go through torch.distributed.run (--multi_gpu), gloo with Accelerator(cpu=True).
    launch = ["accelerate", "launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    script = str(SCRIPTS / "frameworks" / "accelerate_loop.py")
    run = profile(tmp_path, "--", *launch, script, "--sample-ms", "0.2")
    listed = processes(run["baseline"])
    assert [(p["rank"], p["kind"], p["steps"]) for p in listed] == [
        (0, "torchrun", 5),
        (1, "torchrun", 5),
    ]
    ranks = run["report"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["comm_frac"] is not None and r["comm_frac"] > 0 for r in ranks)
    assert run["report"]["facts"]["world_size"] == 2
