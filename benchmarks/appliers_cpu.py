"""Runtime optimizations measured end to end on CPU, through `perfdoctor profile --only ID`.

Each case runs the real pipeline: a baseline, then the variant and the baseline alternating
(A B A B ...) with `--repeat` rounds, and prints the verdict with its speedup and noise band.
It prints, it never asserts: timing claims live here, tests assert behaviour.

    python benchmarks/appliers_cpu.py [--repeat 3] [--case dataloader-workers ...]

Cases:
  dataloader-workers  sample_models/cnn_slow_dataloader.py (input-bound, num_workers=0)
  anomaly-off         sample_models/tabular_mlp_debug.py (set_detect_anomaly(True) left on)
  cpu-threads         a matmul-heavy MLP that calls torch.set_num_threads(1)
  compile             a tiny MLP, where compiling is expected to buy nothing
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE_THREAD_SCRIPT = textwrap.dedent(
    """
    import torch

    torch.set_num_threads(1)  # copied from a data-loading snippet, never removed
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    """
)

TINY_SCRIPT = textwrap.dedent(
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(200):
        x = torch.randn(8, 16)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    """
)


def cases(workdir: Path) -> dict[str, list[str]]:
    one_thread = workdir / "one_thread.py"
    one_thread.write_text(ONE_THREAD_SCRIPT)
    tiny = workdir / "tiny.py"
    tiny.write_text(TINY_SCRIPT)
    return {
        "dataloader-workers": [str(ROOT / "sample_models/cnn_slow_dataloader.py")],
        "anomaly-off": [str(ROOT / "sample_models/tabular_mlp_debug.py"), "--epochs", "1"],
        "cpu-threads": [str(one_thread)],
        "compile": [str(tiny)],
    }


def run_case(opt_id: str, target: list[str], repeat: int, workdir: Path) -> dict:
    out = workdir / f"runs-{opt_id}"
    command = [
        sys.executable, "-m", "perfdoctor", "profile", "--quiet", "--json",
        "--only", opt_id, "--repeat", str(repeat), "--out", str(out), *target,
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=workdir, check=False)
    wall = time.perf_counter() - started
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"id": opt_id, "error": (proc.stderr or proc.stdout).strip()[-300:], "wall_s": wall}
    variant = next((v for v in report.get("variants", []) if opt_id in v["optimizations"]), None)
    return {"id": opt_id, "variant": variant, "wall_s": wall, "baseline": report.get("baseline")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--case", action="append", help="only these cases")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} logical cores; load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for opt_id, target in cases(workdir).items():
            if args.case and opt_id not in args.case:
                continue
            result = run_case(opt_id, target, args.repeat, workdir)
            variant = result.get("variant")
            if variant is None:
                print(f"{opt_id:20s} no variant ran: {result.get('error', 'not a candidate')}")
                continue
            # The paired medians the speedup is the ratio of (the profiled run's p50 is not).
            base_ms = variant.get("baseline_step_ms_p50")
            speedup = variant.get("speedup")
            noise = variant.get("speedup_noise")
            band = f"{speedup:.2f}x ± {noise:.2f}" if speedup and noise is not None else "-"
            base = f"{base_ms:.1f}" if base_ms else "-"
            var = f"{variant['step_ms_p50']:.1f}" if variant.get("step_ms_p50") else "-"
            print(
                f"{opt_id:20s} paired medians {base} ms -> {var} ms  speedup {band:16s} "
                f"{variant['verdict']}: {variant['reason']}  ({result['wall_s']:.0f} s)"
            )


if __name__ == "__main__":
    main()
