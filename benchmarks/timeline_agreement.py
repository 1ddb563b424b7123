"""TIMELINE AGREEMENT: on every trace of the GPU corpus, the GPU timeline section's biggest
idle share beside the cause the headline names (issue 22 part 3), plus the trace's workload
kind, allocator share and capture verdict (parts 2, 4, 6).

    python benchmarks/timeline_agreement.py [more traces ...]

The corpus is `$PERFDOCTOR_GPU_CORPUS`, else `<repo>/../shared/gpu-corpus`; extra trace files
on the command line are added. It prints a table; it never asserts (tests/unit/analyze/
test_timeline_headline.py checks the agreement on corpus traces).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import gpu_view, summary

REPO = Path(__file__).resolve().parents[1]

# The section's idle row -> words the headline uses for that cause.
CAUSE_WORDS = {
    "idle: input data": ("input data",),
    "idle: malloc/free": ("memory allocation",),
    "idle: after a sync": ("synchronizations", "sync"),
    "idle: host busy": ("launch",),
    "idle: launch gaps": ("launch",),
    "idle: dependencies": ("queued work", "communication", "NCCL"),
    "idle: host unrecorded": ("does not record",),
}
# Below this the biggest idle row is not a bottleneck the headline needs to name.
IDLE_FLOOR_PCT = 15.0


def corpus_traces() -> list[Path]:
    env = os.environ.get("PERFDOCTOR_GPU_CORPUS")
    root = Path(env) if env else REPO.parent / "shared" / "gpu-corpus"
    traces = root / "traces"
    if not traces.is_dir():
        return []
    # tb_plugin's expected-metrics file sits beside its input trace: not a trace.
    return sorted(p for p in traces.glob("*.json*") if not p.name.endswith("_expected.json"))


def row(path: Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        (done,) = diagnose_traces([path], Path(tmp))
    report = done.report
    if report is None:
        return f"| {path.name[:48]} | failed | | | | |"
    rows = [(r.label, float(r.value.rstrip("%"))) for r in gpu_view.timeline_rows(report)]
    idle = max((r for r in rows if r[0].startswith("idle")), key=lambda r: r[1], default=None)
    slow = summary.headline(report).slow
    head = slow.split(":")[0] if "biggest cause" not in slow else slow.split(": gpu_")[0]
    if idle is None or idle[1] < IDLE_FLOOR_PCT:
        agree = "n/a (idle below floor)"
    else:
        words = CAUSE_WORDS[idle[0]]
        agree = "yes" if any(w.lower() in head.lower() for w in words) else "NO"
    kind = report.facts.get("workload_kind") or "-"
    alloc = report.facts.get("gpu_idle_alloc_frac")
    alloc_text = f"{alloc:.1%}" if isinstance(alloc, float) else "-"
    idle_text = f"{idle[0]} {idle[1]:.1f}%" if idle else "-"
    return f"| {path.name[:48]} | {idle_text} | {head[:110]} | {agree} | {kind} | {alloc_text} |"


def main(argv: list[str]) -> None:
    paths = corpus_traces() + [Path(a) for a in argv]
    print("| trace | biggest idle row | headline | agree | workload | idle in malloc/free |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        if "param_dlrm_worker" in path.name and "worker0" not in path.name:
            continue  # one rank of the DLRM job stands for the eight
        print(row(path))


if __name__ == "__main__":
    main(sys.argv[1:])
