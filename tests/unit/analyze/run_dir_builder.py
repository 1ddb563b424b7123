"""Builds a complete child run directory by hand (every artifact of docs/run-directory.md),
with figures chosen so that each derived fact can be checked by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from perfdoctor import rundir
from perfdoctor.model import DeviceInfo, RunManifest, RunSpec, StepPlan, StepRecord, Target

FIXTURES = Path(__file__).parent / "fixtures"
TIMED_WALL_MS = (100.0, 110.0, 120.0, 200.0)
TRACE_NAME = "host_4242.1795322136125443121.pt.trace.json"

OBSERVATIONS: dict[str, Any] = {
    "step_detection": "optimizer",
    "torch": {
        "version": "2.13.0",
        "num_threads": 1,
        "anomaly_enabled": True,
        "cudnn_benchmark": False,
        "cudnn_deterministic": False,
        "deterministic_algorithms": False,
        "tf32_matmul": False,
    },
    "cpu": {"logical_cores": 16, "physical_cores": 8},
    "dataloaders": [
        {
            "num_workers": 0,
            "pin_memory": False,
            "prefetch_factor": None,
            "batch_size": 64,
            "persistent_workers": False,
            "iterable": False,
            "batches": 2,
            "location": {"file": "train.py", "line": 44, "function": "evaluate"},
        },
        {
            "num_workers": 0,
            "pin_memory": False,
            "prefetch_factor": None,
            "batch_size": 8,
            "persistent_workers": False,
            "iterable": False,
            "batches": 25,
            "location": {"file": "train.py", "line": 40, "function": "main"},
        },
    ],
    "optimizers": [
        {
            "class": "Adam",
            "impl": "single_tensor",
            "param_count": 123,
            "steps": 7,
            "location": {"file": "train.py", "line": 52, "function": "main"},
        }
    ],
    "roots": [
        {
            "class": "Net",
            "param_count": 1000,
            "trainable_param_count": 900,
            "conv_count": 3,
            "channels_last": False,
            "compiled": False,
            "conv_bias_before_bn": 2,
            "data_parallel": False,
            "ddp": False,
        }
    ],
    "autocast": {"used": True, "dtype": "bfloat16", "grad_scaler": False},
    "zero_grad": {"calls": 7, "set_to_none": False},
    "forwards": {
        "root_calls": 10,
        "grad_without_backward": 3,
        "locations": [{"file": "train.py", "line": 71, "function": "evaluate", "count": 3}],
    },
    "profiler": {"user_profiler": False, "emit_nvtx": False},
    "dist": {"initialized": False, "backend": None, "world_size": 1},
    "compile": {"recompiles": 0, "graph_breaks": 0},
    "inputs": {"distinct_shapes_after_warmup": 1},
    "cuda_memory": {
        "max_allocated_bytes": 9000,
        "max_reserved_bytes": 12000,
        "total_bytes": 85029158912,
        "alloc_retries": 3,
        "ooms": 0,
    },
    "memory_history": {"max_entries": 100000, "entries": 11, "truncated": False},
    "locations": {"debug_mode": [{"file": "train.py", "line": 12, "function": "<module>"}]},
    "warnings": ["the script set anomaly detection"],
}


def _steps() -> list[StepRecord]:
    steps = [StepRecord(index=i, phase="warmup", wall_ms=500.0, loss=3.0) for i in range(2)]
    for k, wall in enumerate(TIMED_WALL_MS):
        i = k + 2
        steps.append(
            StepRecord(
                index=i,
                phase="timed",
                wall_ms=wall,
                data_wait_ms=10.0,
                forward_ms=30.0,
                backward_ms=40.0,
                optimizer_ms=10.0,
                micro_batches=1,
                loss=2.0 - 0.1 * k,
                batch_size=8,
                rss_bytes=1000 + 100 * i,
                cuda_allocated_bytes=5000,
                cuda_max_allocated_bytes=8000,
            )
        )
    steps.append(StepRecord(index=6, phase="profiled", wall_ms=900.0, loss=1.5))
    return steps


def _samples() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"kind": "clock", "t": 0.0, "unix_s": 1795322619.87},
        {"kind": "note", "t": 0.0, "message": "GPU 0: pcie_tx_kbs not sampled (NotSupported)"},
    ]
    for t in (1.1, 1.3, 1.5, 1.7, 1.9):
        rows.append(
            {
                "kind": "cpu",
                "t": t,
                "cpu_percent": [50.0, 100.0],
                "rss_bytes": 2000,
                "child_cpu_percent": 120.0,
            }
        )
    throttle = {1.3: 0, 1.5: 4, 1.7: 0, 1.9: 1}
    for t in (1.0, 1.3, 1.5, 1.7, 1.9, 2.1):
        rows.append(
            {
                "kind": "gpu",
                "t": t,
                "index": 0,
                "util_gpu": 80,
                "power_w": 300.0,
                "mem_used_bytes": 4000,
                "energy_mj": t * 1e6,
                "throttle_reasons": throttle.get(t, 0),
                "gpm_sm_active": 0.5,
                "gpm_tensor_active": 0.25,
            }
        )
    return rows


def build_run_dir(root: Path, *, with_trace: bool = True, with_memory: bool = True) -> Path:
    run = root / "baseline"
    run.mkdir(parents=True)
    spec = RunSpec(
        label="baseline",
        target=Target(kind="script", name="train.py", argv=("--epochs", "1")),
        cwd=str(root),
        run_dir=str(run),
        plan=StepPlan(warmup_steps=2, timed_steps=4, profiled_steps=1),
    )
    rundir.write_json(run / rundir.SPEC_FILE, spec)
    manifest = RunManifest(
        label="baseline",
        status="completed",
        exit_code=0,
        wall_s=12.5,
        steps_seen=7,
        step_detection="optimizer",
        plan_complete=True,
        versions={"torch": "2.13.0"},
        device=DeviceInfo(
            kind="cuda",
            name="NVIDIA H100 80GB HBM3",
            count=1,
            total_memory_bytes=85029158912,
            compute_capability="9.0",
        ),
        warnings=("manifest warning",),
    )
    rundir.write_json(run / rundir.MANIFEST_FILE, manifest)
    rundir.write_json(run / rundir.OBSERVATIONS_FILE, OBSERVATIONS)
    steps = _steps()
    rundir.append_jsonl(run / rundir.STEPS_FILE, steps)
    progress = [{"step": s.index, "phase": s.phase, "t": 0.8 + 0.2 * s.index} for s in steps]
    progress[-1]["t"] = 2.5
    rundir.append_jsonl(run / rundir.PROGRESS_FILE, progress)
    rundir.append_jsonl(run / rundir.SAMPLES_FILE, _samples())
    if with_trace:
        shutil.copy(FIXTURES / "cuda_two_steps.json", run / TRACE_NAME)
    if with_memory:
        shutil.copy(FIXTURES / "snapshot_history.pickle", run / rundir.MEMORY_SNAPSHOT_FILE)
    return run


def rewrite_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
