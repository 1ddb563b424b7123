"""torch-tb-profiler reference values for one trace file, run by oracle.py in its own venv.

    <tbp-venv>/bin/python benchmarks/_oracle_tbp.py TRACE_FILE [EXPECTED_GPU_METRICS_JSON]

Uses the plugin's own loader as TensorBoard does for one worker (RunProfileData.parse, then
RunGenerator.generate_run_profile) and prints one JSON object: {"version", "metrics",
"skipped"} or {"error"}. With EXPECTED_GPU_METRICS_JSON (the plugin's own test expectation,
the trace with its GPU counters appended) it also says whether the counters this harness gets
are the expected ones. This file must not import perfdoctor: the plugin's venv does not have it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import tempfile
import warnings
from typing import Any

from _oracle_json import num as _num

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

TOP_N = 10


def main() -> int:
    path = sys.argv[1]
    expected = sys.argv[2] if len(sys.argv) > 2 else None
    out: dict[str, Any] = {"metrics": {}, "skipped": {}}
    try:
        from importlib.metadata import version

        from torch_tb_profiler.profiler import data as tbp_data
        from torch_tb_profiler.profiler.event_parser import ProfileRole
        from torch_tb_profiler.profiler.gpu_metrics_parser import GPUMetricsParser
        from torch_tb_profiler.profiler.run_generator import RunGenerator
        from torch_tb_profiler.profiler.trace import EventTypes

        out["version"] = version("torch-tb-profiler")
        # The window the plugin uses for GPU Utilization is a local of RunProfileData.process
        # (the step span after its device-side adjustment); record it on the way in.
        window: dict[str, float] = {}
        original = GPUMetricsParser.parse_events.__func__

        def recording(cls, events, g_start, g_end, s_start, s_end):  # type: ignore[no-untyped-def]
            window.update(global_start=g_start, global_end=g_end, start=s_start, end=s_end)
            return original(cls, events, g_start, g_end, s_start, s_end)

        GPUMetricsParser.parse_events = classmethod(recording)  # type: ignore[method-assign]
        with tempfile.TemporaryDirectory() as cache:
            data = tbp_data.RunProfileData.parse("worker0", None, path, cache)
            profile = RunGenerator("worker0", None, data).generate_run_profile()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
        sys.stdout.write(json.dumps(out) + "\n")
        return 0

    m = out["metrics"]
    gm = data.gpu_metrics_parser
    raw = _raw_facts(path)
    if raw["profiler_steps"]:
        m["steps"] = len(data.steps_costs)
    else:  # EventParser.parse_steps makes one step of the whole CPU span
        m["pseudo_steps"] = len(data.steps_costs)
        out["skipped"]["steps"] = "no ProfilerStep#: the plugin makes one step of the CPU span"
    m["step_names"] = list(data.steps_names)
    if window:
        m["gpu_window_us"] = _num(window["end"] - window["start"])
    devices = sorted(gm.gpu_ids)
    m["devices"] = devices
    for d in devices:
        m[f"gpu{d}_utilization"] = _num(gm.gpu_utilization[d])
        m[f"gpu{d}_sm_efficiency"] = _num(gm.avg_approximated_sm_efficiency_per_device[d])
        occ = gm.avg_occupancy_per_device[d]
        m[f"gpu{d}_occupancy_pct"] = _num(occ)
        tc = data.tc_ratio[d] if data.tc_ratio is not None else None
        m[f"gpu{d}_tensor_core_ratio"] = _num(tc)
    if not devices:
        out["skipped"]["gpu_metrics"] = "no kernel events the plugin recognises"

    # Overview: average per step of each role, priority Kernel > Memcpy > Memset >
    # Communication > Runtime > DataLoader > CPU Exec > Other (OverallParser).
    names = {
        ProfileRole.Kernel: "kernel",
        ProfileRole.Memcpy: "memcpy",
        ProfileRole.Memset: "memset",
        ProfileRole.Communication: "communication",
        ProfileRole.Runtime: "runtime",
        ProfileRole.DataLoader: "dataloader",
        ProfileRole.CpuOp: "cpu_exec",
        ProfileRole.Other: "other",
        ProfileRole.Total: "total",
    }
    avg = data.avg_costs.costs
    step = {names[r]: _num(avg[r]) for r in names}
    m["step_breakdown_us"] = step
    total = avg[ProfileRole.Total]
    m["step_breakdown_frac"] = {
        k: _num(v / total) if total else None for k, v in step.items() if k != "total"
    }
    if raw["profiler_steps"]:
        m["step_us_avg"] = _num(total)
        m["step_us_each"] = [_num(c.costs[ProfileRole.Total]) for c in data.steps_costs]
    if not raw["profiler_steps"]:
        out["skipped"]["dataloader_us_per_step"] = "no ProfilerStep#: no per-step figure"
    elif raw["dataloader_user_annotation"]:
        # trace.create_trace_event keeps user_annotation events only for ProfilerStep# and
        # nccl:/gloo: names, so 0.4.3 never sees these DataLoader spans.
        out["skipped"]["dataloader_us_per_step"] = (
            f"{raw['dataloader_user_annotation']} DataLoader spans are user_annotation "
            "events, which the plugin drops"
        )
    else:
        m["dataloader_us_per_step"] = step["dataloader"]
    m["has_runtime"] = bool(data.has_runtime)
    m["has_kernel"] = bool(data.has_kernel)
    m["has_communication"] = bool(data.has_communication)

    comm = data.comm_overlap_costs or []
    if data.has_communication and comm:
        c_total = sum(c.communication for c in comm)
        overlap = sum(c.overlap for c in comm)
        m["comm_us_per_step"] = _num(c_total / len(comm))
        m["comm_overlap_us_per_step"] = _num(overlap / len(comm))
        m["comm_overlap_frac"] = _num(overlap / c_total) if c_total else None
    else:
        out["skipped"]["comm_overlap"] = "no communication the plugin recognises"

    if data.kernel_stat is not None and len(data.kernel_stat):
        ks = data.kernel_stat
        kernel_sum = float(ks["sum"].sum())
        m["kernel_count"] = int(ks["count"].sum())
        m["kernel_time_us"] = _num(kernel_sum)
        m["kernel_us_mean"] = _num(kernel_sum / float(ks["count"].sum()))
        m["top_kernels"] = [
            {
                "name": str(name),
                "calls": int(row["count"]),
                "us_total": _num(row["sum"]),
                "us_mean": _num(row["mean"]),
                "share": _num(row["sum"] / kernel_sum) if kernel_sum else None,
                "tensor_cores": bool(row["tc_used"]),
            }
            for name, row in ks.head(TOP_N).iterrows()
        ]
        m["tc_used_ratio"] = _num(data.tc_used_ratio)
    else:
        out["skipped"]["kernel_view"] = "no kernel events the plugin recognises"

    by_type: dict[str, int] = {}
    for e in data.events:
        by_type[e.type] = by_type.get(e.type, 0) + 1
    m["events_by_type"] = by_type
    m["memcpy_count"] = by_type.get(EventTypes.MEMCPY, 0)
    m["memset_count"] = by_type.get(EventTypes.MEMSET, 0)
    m["runtime_count"] = by_type.get(EventTypes.RUNTIME, 0)

    if expected:
        out["expected_check"] = _check_expected(profile, expected)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _raw_facts(path: str) -> dict[str, int]:
    """What the file holds that the plugin may not parse (read again, plainly)."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = loader = 0
    for e in events:
        name = str(e.get("name", ""))
        if name.startswith("ProfilerStep#") and e.get("ph") == "X":
            steps += 1
        if name.startswith(("enumerate(DataLoader)#", "enumerate(DataPipe)#")) and str(
            e.get("cat", "")
        ).lower() in ("user_annotation", "gpu_user_annotation"):
            loader += 1
    return {"profiler_steps": steps, "dataloader_user_annotation": loader}


def _check_expected(profile: Any, expected_path: str) -> dict[str, Any]:
    """The plugin's expected file is the input trace with the GPU counter events that
    RunProfile.append_gpu_metrics adds. Its own test (test_profiler.py, test_dump_gpu_metrics)
    feeds hand-scaled buckets: "Real data values are 1/100 of these" for GPU Utilization and
    1/10 for Est. SM Efficiency. So the counters computed here from the input trace must be
    the expected ones at that scale (the 1/0 baseline pair is not scaled)."""
    with open(expected_path) as fh:
        want = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "C"]
    got = [json.loads(s) for s in profile.gpu_metrics]
    scale = {"GPU Utilization": 100.0, "Est. SM Efficiency": 10.0}
    mismatches = abs(len(got) - len(want))
    for a, b in zip(got, want, strict=False):
        (key, va), (_, vb) = next(iter(a["args"].items())), next(iter(b["args"].items()))
        same_event = a["name"] == b["name"] and a["ts"] == b["ts"] and a["pid"] == b["pid"]
        if not same_event or not (va == vb or math.isclose(va * scale[key], vb, rel_tol=1e-9)):
            mismatches += 1
    return {
        "counters_expected": len(want),
        "counters_got": len(got),
        "mismatches": mismatches,
        "scale": "utilization x100, SM efficiency x10, as in the plugin's test",
    }


if __name__ == "__main__":
    raise SystemExit(main())
