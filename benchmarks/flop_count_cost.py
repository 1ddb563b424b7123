"""What counting one step's FLOPs costs (collect/flop_count.py), and that it leaves the timed
steps alone.

    python benchmarks/flop_count_cost.py [--rounds 3] [--model tuned_mlp ...]

Per model and round, two runs of perfdoctor's child through launch(), interleaved (on, off;
then off, on on the next round, so drift cancels in the pairs): PERFDOCTOR_FLOP_COUNT=1 (the
default: FlopCounterMode around the last warm-up step) and =0 (no counting). Reported:

  cost      the counted warm-up step's wall time minus the warm-up step before it, in the
            counting run (what FlopCounterMode adds to that one step);
  timed     median timed step, counting run / plain run, paired per round: 1.0 means the
            timed steps do not see the counter (they run after it is gone);
  FLOPs     the count, and the losses of the two runs compared (same seed: equal when the
            count changed nothing the script computes).

It prints, it never asserts; the load is printed beside every figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import ROOT, machine_line, out, sample_models, uptime

from perfdoctor.collect.launcher import launch
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.rundir import OBSERVATIONS_FILE, STEPS_FILE, read_json, read_jsonl

ARGS = {
    "tuned_mlp": ("--device", "cpu", "--log-every", "1000000"),
    "gpt_char_lm": ("--device", "cpu", "--log-every", "1000000"),
    "cnn_slow_dataloader": ("--device", "cpu", "--samples", "640", "--batch-size", "32"),
}
PLAN = StepPlan(warmup_steps=3, timed_steps=12, profiled_steps=0)


def one_run(model: Path, work: Path, count: bool) -> dict:
    run_dir = work / f"{model.stem}-{'on' if count else 'off'}"
    os.environ["PERFDOCTOR_FLOP_COUNT"] = "1" if count else "0"
    try:
        spec = RunSpec(
            label="count" if count else "plain",
            target=Target(
                "script", str(model), (*ARGS[model.stem], "--max-steps", str(PLAN.total_steps + 5))
            ),
            cwd=str(ROOT),
            run_dir=str(run_dir),
            plan=PLAN,
            profile=False,
        )
        manifest = launch(spec, echo_output=False)
    finally:
        del os.environ["PERFDOCTOR_FLOP_COUNT"]
    if manifest.status != "completed":
        raise SystemExit(f"{model.name}: {manifest.status} {manifest.error}")
    rows = list(read_jsonl(run_dir / STEPS_FILE))
    info = read_json(run_dir / OBSERVATIONS_FILE).get("flop_count") or {}
    return {
        "timed": statistics.median(r["wall_ms"] for r in rows if r["phase"] == "timed"),
        "losses": [r.get("loss") for r in rows],
        "info": info,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", action="append", choices=sorted(ARGS))
    args = parser.parse_args(argv)
    models = [m for m in sample_models() if m.stem in (args.model or ARGS)]
    out(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in models:
            ratios, costs, flops, same = [], [], None, True
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                runs = {count: one_run(model, work / str(r), count) for count in order}
                on, off = runs[True], runs[False]
                ratios.append(on["timed"] / off["timed"])
                info = on["info"]
                flops = info.get("flops_per_step")
                if info.get("counted_step_ms") is not None and info.get("previous_step_ms"):
                    costs.append(info["counted_step_ms"] - info["previous_step_ms"])
                same = same and on["losses"] == off["losses"]
                out(
                    f"{model.stem} round {r}: timed on {on['timed']:.2f} ms, off "
                    f"{off['timed']:.2f} ms, ratio {ratios[-1]:.3f}; counted step "
                    f"{info.get('counted_step_ms', float('nan')):.1f} ms vs previous "
                    f"{info.get('previous_step_ms') or float('nan'):.1f} ms | {uptime()}"
                )
            out(
                f"== {model.stem}: FLOPs/step {flops}, counting cost median "
                f"{statistics.median(costs) if costs else float('nan'):.1f} ms, timed ratio "
                f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-"
                f"{max(ratios):.3f}), losses identical: {same}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
