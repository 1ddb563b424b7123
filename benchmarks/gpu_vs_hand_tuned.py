"""What perfdoctor's runtime optimizations buy on a GPU, next to a hand-tuned copy of the script.

For each sample model (cnn, gpt):

1. the real pipeline: `perfdoctor profile --only IDS --repeat R` on the unmodified sample, so
   every optimization is tried alone in A/B rounds, and the accepted ones stacked;
2. paired rounds (order alternating A B / B A) of the plain sample and its hand-tuned copy
   (benchmarks/hand_tuned/), each under `perfdoctor profile --no-apply`, so both are timed the
   same way (median timed step on the GPU's clock, same plan, same seed).

Both parts give a speedup against the same plain sample; their ratio says how much of the
hand-tuned speedup perfdoctor recovers without touching the file. It prints and writes a JSON
summary (--json-out); it never asserts. Run it on a CUDA machine:

    python benchmarks/gpu_vs_hand_tuned.py --model cnn --rounds 3 [--json-out cnn.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import QUIET_LOG_EVERY, ROOT, machine_line, out

MODELS: dict[str, dict[str, Any]] = {
    "cnn": {
        "sample": ROOT / "sample_models" / "cnn_slow_dataloader.py",
        "tuned": ROOT / "benchmarks" / "hand_tuned" / "cnn_tuned.py",
        "only": "dataloader-workers,amp-bf16,channels-last,cudnn-benchmark,compile",
        "args": ["--epochs", "50"],
    },
    "gpt": {
        "sample": ROOT / "sample_models" / "gpt_char_lm.py",
        "tuned": ROOT / "benchmarks" / "hand_tuned" / "gpt_tuned.py",
        "only": "amp-bf16,compile,compile-cudagraphs,tf32",
        "args": ["--epochs", "50"],
    },
}
# compile's first steps are its compile time: keep them in the warm-up.
PLAN = ["--warmup", "10", "--steps", "30", "--profile-steps", "3"]


def perfdoctor(args: list[str], workdir: Path, name: str) -> tuple[dict[str, Any] | None, float]:
    runs = workdir / name
    command = [sys.executable, "-m", "perfdoctor", "profile", "--quiet", "--json", "--out",
               str(runs), *PLAN, *args]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=workdir, check=False)
    wall = time.perf_counter() - started
    try:
        return json.loads(proc.stdout), wall
    except json.JSONDecodeError:
        out(f"  {name}: no report (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
        return None, wall


def script_args(model: dict[str, Any], script: Path) -> list[str]:
    return [str(script), *model["args"], "--log-every", QUIET_LOG_EVERY]


def session_part(name: str, model: dict[str, Any], repeat: int, workdir: Path) -> dict[str, Any]:
    report, wall = perfdoctor(
        ["--only", model["only"], "--repeat", str(repeat), *script_args(model, model["sample"])],
        workdir,
        f"{name}-session",
    )
    if report is None:
        return {"error": "the session wrote no report"}
    base = report.get("baseline") or {}
    out(
        f"  perfdoctor session ({wall:.0f} s): baseline p50 {base.get('step_ms_p50')} ms "
        "(profiled run); variants: paired medians baseline -> variant"
    )
    variants = []
    for v in report.get("variants") or []:
        variants.append({k: v.get(k) for k in (
            "label", "optimizations", "step_ms_p50", "speedup", "speedup_noise",
            "peak_memory_bytes", "loss_delta", "verdict", "reason")})  # fmt: skip
        noise = v.get("speedup_noise") or 0
        speed = f"{v['speedup']:.2f}x ± {noise:.2f}" if v.get("speedup") else "-"
        out(f"    {v['label']:24s} {v.get('baseline_step_ms_p50') or 0:8.2f} -> "
            f"{v.get('step_ms_p50') or 0:8.2f} ms  {speed:16s} "
            f"{v['verdict']}: {v['reason']}")  # fmt: skip
    return {"baseline_step_ms_p50": base.get("step_ms_p50"), "variants": variants, "wall_s": wall}


def paired_part(name: str, model: dict[str, Any], rounds: int, workdir: Path) -> dict[str, Any]:
    plain: list[float] = []
    tuned: list[float] = []
    ratios: list[float] = []
    for r in range(rounds):
        order = [("plain", model["sample"]), ("tuned", model["tuned"])]
        if r % 2:
            order.reverse()
        got: dict[str, float] = {}
        for arm, script in order:
            report, _ = perfdoctor(
                ["--no-apply", *script_args(model, script)], workdir, f"{name}-{arm}-{r}"
            )
            p50 = ((report or {}).get("baseline") or {}).get("step_ms_p50")
            if p50:
                got[arm] = float(p50)
        if len(got) == 2:
            plain.append(got["plain"])
            tuned.append(got["tuned"])
            ratios.append(got["plain"] / got["tuned"])
        figures = ", ".join(f"{arm} {ms:.2f} ms" for arm, ms in got.items())
        out(f"  round {r + 1}: {figures or 'no figures'}")
    return {
        "plain_step_ms": plain,
        "tuned_step_ms": tuned,
        "speedup_per_round": ratios,
        "speedup_median": statistics.median(ratios) if ratios else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), action="append")
    parser.add_argument("--rounds", type=int, default=3, help="paired plain/hand-tuned rounds")
    parser.add_argument("--repeat", type=int, default=2, help="A/B rounds of the session")
    parser.add_argument("--only", help="optimization ids for the session (default per model)")
    parser.add_argument("--skip-session", action="store_true")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the session directories here")
    args = parser.parse_args()
    out(machine_line())
    summary: dict[str, Any] = {"machine": machine_line(), "plan": PLAN}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for name in args.model or sorted(MODELS):
            model = dict(MODELS[name])
            if args.only:
                model["only"] = args.only
            out(f"{name}: {model['sample'].name} vs {model['tuned'].name}")
            result: dict[str, Any] = {}
            if not args.skip_session:
                result["session"] = session_part(name, model, args.repeat, workdir)
                summary[name] = result
                if args.json_out:  # written as it goes: a run cut short keeps what it measured
                    args.json_out.write_text(json.dumps(summary, indent=2))
            result["hand_tuned"] = paired_part(name, model, args.rounds, workdir)
            stacked = _best_accepted(result.get("session", {}))
            hand = result["hand_tuned"]["speedup_median"]
            if stacked and hand:
                result["recovered"] = stacked / hand
                out(f"  perfdoctor {stacked:.2f}x vs hand-tuned {hand:.2f}x: "
                    f"{stacked / hand:.0%} of the hand-tuned speedup")  # fmt: skip
            summary[name] = result
            if args.json_out:
                args.json_out.write_text(json.dumps(summary, indent=2))


def _best_accepted(session: dict[str, Any]) -> float | None:
    """The speedup perfdoctor ends with: the stacked variant, else the best accepted one."""
    accepted = [v for v in session.get("variants", []) if v.get("verdict") == "accepted"]
    stacked = [v for v in accepted if v.get("label") == "stacked"]
    pool = stacked or accepted
    return max((v["speedup"] for v in pool if v.get("speedup")), default=None) or None


if __name__ == "__main__":
    main()
