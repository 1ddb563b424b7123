"""`perfdoctor profile --plan-batch` end to end on a small DataLoader script (CPU).

The script (scripts/batch_loader.py) takes no batch-size argument, so the plan must rebuild
its DataLoader; its activations grow with the batch and a fixed per-step cost makes larger
batches faster per sample. Asserts what the plan did and wrote, never how fast it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_in_process import profile_in_process
from load_limits import scaled

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "batch_loader.py"


def test_plan_batch_fits_checks_and_confirms(tmp_path: Path) -> None:
    # The parent in this process: what the plan did and wrote is tested, not the entry point.
    done = profile_in_process(
        "--no-apply", "--plan-batch", "--steps", "3", "--warmup", "1", "--profile-steps", "0",
        "--repeat", "1", "--quiet", "--timeout", f"{scaled(600):.0f}",
        "-o", tmp_path / "runs", SCRIPT,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    session = (tmp_path / "runs" / "latest").resolve()
    plan = json.loads((session / "batch_plan.json").read_text())
    assert plan["knob"] == "dataloader" and plan["script_batch"] == 16
    batches = [p["batch"] for p in plan["curve"]]
    assert batches == [8, 16, 32, 64]
    assert all(p["status"] == "completed" and p["peak_bytes"] > 0 for p in plan["curve"])
    # The DataLoader really was rebuilt in each run at another batch.
    spec = json.loads((session / "batch-32" / "observations.json").read_text())
    applied = {a["id"]: a for a in spec["applied"]}
    assert applied["batch-size"]["applied"] and "16 -> 32" in applied["batch-size"]["detail"]
    # 4 MiB of activations per sample, at least (tanh's output; the backward holds more).
    assert plan["per_sample_bytes"] > 3 * 2**20
    # The check at a batch the fit did not measure is within the 15%.
    assert plan["verify_batch"] == 64 and abs(plan["verify_error_frac"]) < 0.15
    # ... and the plan says so: the per-sample part is most of the peak, so it counts.
    assert plan["prediction_confidence"] == "confirmed", plan["confidence_why"]
    assert plan["trigger"] == "--plan-batch" and plan.get("recheck_batch") is None
    assert plan["best_batch"] in batches
    if plan["best_batch"] != 16:
        assert plan["confirmation"].split(":")[0] in ("accepted", "rejected", "undecided")
        assert (session / f"batch-{plan['best_batch']}" / "repeat-2").is_dir()
    report = (session / "report.md").read_text()
    assert "Batch size and memory (--plan-batch)" in report and "training recipe" in report
    series = json.loads((session / "report.json").read_text())["series"]
    assert series["batch_plan"]["best_batch"] == plan["best_batch"]
