"""HolisticTraceAnalysis reference values for one job directory, run by oracle.py in HTA's venv.

    <hta-venv>/bin/python benchmarks/_oracle_hta.py JOB_DIR

JOB_DIR holds one trace file per rank (HTA's layout). Prints one JSON object:
{"version": ..., "ranks": {rank: {"file": name, "metrics": {...}, "skipped": {...}}}} or
{"error": ...}. Each analysis runs on its own so one failing does not lose the others; a
metric HTA cannot give on a trace is listed under "skipped" with the reason. This file must
not import perfdoctor: HTA's venv does not have it.

Everything here is HTA's own API (TraceAnalysis.*) or HTA's own helpers on HTA's own parsed
frame (Trace.traces after its filtering), never a re-implementation: the point is what HTA says.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
import warnings
from typing import Any

from _oracle_json import num as _num

warnings.filterwarnings("ignore")  # pandas FutureWarnings from inside HTA
# HTA logs every parse step at INFO/WARNING and plotly is never shown (visualize=False).
logging.disable(logging.WARNING)

LAUNCH_NAMES_HTA = ("cudaLaunchKernel", "cudaLaunchKernelExC")  # cuda_kernel_analysis.py
KERNEL_CATS = ("kernel", "Kernel")
MEMCPY_CATS = ("gpu_memcpy", "Memcpy")
MEMSET_CATS = ("gpu_memset", "Memset")
TOP_N = 10


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def main() -> int:
    job_dir = sys.argv[1]
    out: dict[str, Any] = {}
    try:
        from importlib.metadata import version

        from hta.trace_analysis import TraceAnalysis

        out["version"] = version("HolisticTraceAnalysis")
        analysis = TraceAnalysis(trace_dir=job_dir)
    except Exception as exc:
        out["error"] = _err(exc)
        sys.stdout.write(json.dumps(out) + "\n")
        return 0

    t = analysis.t
    ranks: dict[str, dict[str, Any]] = {}
    for rank, path in sorted(t.trace_files.items()):
        ranks[str(rank)] = {"file": os.path.basename(path), "metrics": {}, "skipped": {}}
    out["ranks"] = ranks

    def run(label: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:
            for r in ranks.values():
                r["skipped"].setdefault(label, _err(exc))
            if os.environ.get("ORACLE_DEBUG"):
                traceback.print_exc()

    run("temporal_breakdown", lambda: _temporal(analysis, ranks))
    run("idle_time_breakdown", lambda: _idle(analysis, ranks))
    run("comm_comp_overlap", lambda: _overlap(analysis, ranks))
    run("kernel_breakdown", lambda: _kernels(analysis, ranks))
    run("kernel_type_time", lambda: _kernel_type_time(analysis, ranks))
    run("counts", lambda: _counts(analysis, ranks))
    run("cuda_kernel_launch_stats", lambda: _launch_stats(analysis, ranks))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _temporal(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    df = analysis.get_temporal_breakdown(visualize=False)
    for row in df.to_dict("records"):
        m = ranks[str(int(row["rank"]))]["metrics"]
        window = row["kernel_time(us)"]
        m["gpu_window_us"] = _num(window)
        m["idle_us"] = _num(row["idle_time(us)"])
        m["compute_us"] = _num(row["compute_time(us)"])
        m["non_compute_us"] = _num(row["non_compute_time(us)"])
        for key in ("idle", "compute", "non_compute"):
            m[f"{key}_frac"] = _num(row[f"{key}_time(us)"] / window) if window else None
        m["busy_frac"] = _num(1 - row["idle_time(us)"] / window) if window else None


def _idle(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    for rank in ranks:
        df, _ = analysis.get_idle_time_breakdown(
            ranks=[int(rank)], visualize=False, show_idle_interval_stats=False
        )
        m = ranks[rank]["metrics"]
        per_stream: dict[str, dict[str, Any]] = {}
        totals = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
        for row in df.to_dict("records"):
            cat = str(row["idle_category"])
            s = per_stream.setdefault(str(int(row["stream"])), {})
            s[f"{cat}_us"] = _num(row["idle_time"])
            totals[cat] = totals.get(cat, 0.0) + float(row["idle_time"])
        idle_sum = sum(totals.values())
        for s in per_stream.values():
            total = sum(v for k, v in s.items() if k.endswith("_us") and v is not None)
            for cat in ("host_wait", "kernel_wait", "other"):
                s.setdefault(f"{cat}_us", 0)
                s[f"{cat}_share"] = _num(s[f"{cat}_us"] / total) if total else None
        m["idle_per_stream"] = per_stream
        for cat, v in totals.items():
            m[f"idle_{cat}_us"] = _num(v)
            m[f"idle_{cat}_share"] = _num(v / idle_sum) if idle_sum else None
        # The stream with the most COMPUTATION kernel time: the compute stream, whose idle
        # time is what a "launch-bound" or "tiny kernels" diagnosis is about.
        from hta.utils.utils import get_kernel_type

        sym = analysis.t.symbol_table.get_sym_table()
        trace_df = analysis.t.get_trace(int(rank))
        gpu = trace_df[trace_df["stream"].ne(-1)]
        is_comp = {i: get_kernel_type(name) == "COMPUTATION" for i, name in enumerate(sym)}
        comp = gpu[gpu["name"].map(is_comp)]
        busy = comp.groupby("stream")["dur"].sum().sort_values(ascending=False)
        if len(busy):
            main = str(int(busy.index[0]))
            m["compute_stream"] = int(main)
            for cat in ("host_wait", "kernel_wait", "other"):
                got = per_stream.get(main, {})
                m[f"compute_stream_idle_{cat}_share"] = got.get(f"{cat}_share")
                m[f"compute_stream_idle_{cat}_us"] = got.get(f"{cat}_us")


def _overlap(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    df = analysis.get_comm_comp_overlap(visualize=False)
    for row in df.to_dict("records"):
        r = ranks[str(int(row["rank"]))]
        pct = _num(row["comp_comm_overlap_pctg"])
        if pct is None:
            r["skipped"]["comm_overlap_frac"] = "no communication kernels (0/0)"
        else:
            r["metrics"]["comm_overlap_frac"] = pct / 100.0


def _kernels(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    # duration_ratio=1.0: no cut by cumulative share, only the TOP_N per type are named.
    type_df, all_df = analysis.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=TOP_N, include_memory_kernels=True
    )
    if len(ranks) == 1:
        m = next(iter(ranks.values()))["metrics"]
        m["kernel_type_pct_api"] = {
            str(r["kernel_type"]): _num(r["percentage"]) for r in type_df.to_dict("records")
        }
    for rank in ranks:
        rows = all_df[all_df["rank"].eq(int(rank))]
        kernels_total = float(
            rows[rows["kernel_type"].isin(["COMPUTATION", "COMMUNICATION"])]["sum (us)"].sum()
        )
        all_total = float(rows["sum (us)"].sum())
        m = ranks[rank]["metrics"]
        m["kernel_time_us"] = _num(kernels_total)
        m["gpu_op_time_us"] = _num(all_total)
        named = rows[rows["name"].ne("others")].sort_values("sum (us)", ascending=False)
        top = []
        for r in named.to_dict("records"):
            if r["kernel_type"] == "MEMORY":
                continue
            top.append(
                {
                    "name": str(r["name"]),
                    "type": str(r["kernel_type"]),
                    "us_total": _num(r["sum (us)"]),
                    "us_mean": _num(r["mean (us)"]),
                    "share": _num(r["sum (us)"] / kernels_total) if kernels_total else None,
                }
            )
        m["top_kernels"] = top[:TOP_N]
        by_type = rows.groupby("kernel_type")["sum (us)"].sum()
        for kt, v in by_type.items():
            m[f"kernel_sum_share_{str(kt).lower()}"] = _num(v / all_total) if all_total else None


def _kernel_type_time(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    """Per rank, what get_gpu_kernel_breakdown's first frame gives for all ranks together:
    wall time (merged intervals) per kernel type, overlaps as their own labels."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import get_kernel_type

    sym = analysis.t.symbol_table.get_sym_table()
    for rank in ranks:
        trace_df = analysis.t.get_trace(int(rank))
        gpu = trace_df[trace_df["stream"].ne(-1)].copy()
        gpu["kernel_type"] = gpu["name"].map(lambda x: get_kernel_type(sym[x]))
        got = BreakdownAnalysis._get_gpu_kernel_type_time(
            gpu, ["COMPUTATION", "COMMUNICATION", "MEMORY"]
        )
        total = float(got["sum"].sum())
        m = ranks[rank]["metrics"]
        m["kernel_type_time_us"] = {
            str(r["kernel_type"]): _num(r["sum"]) for r in got.to_dict("records")
        }
        m["kernel_type_time_share"] = {
            str(r["kernel_type"]): _num(r["sum"] / total) for r in got.to_dict("records")
        }
        # GPU time with any communication kernel running (alone or overlapped).
        m["comm_time_us"] = _num(
            sum(
                float(r["sum"])
                for r in got.to_dict("records")
                if "COMMUNICATION" in r["kernel_type"]
            )
        )


def _counts(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    t = analysis.t
    ids = t.symbol_table.get_sym_id_map()

    def id_set(names: tuple[str, ...]) -> list[int]:
        return [ids[n] for n in names if n in ids]

    iterations = t.get_iterations()
    for rank in ranks:
        df = t.get_trace(int(rank))
        gpu = df[df["stream"].ne(-1)]
        cpu = df[df["stream"].eq(-1)]
        m = ranks[rank]["metrics"]
        m["iterations"] = len(t.get_iterations(int(rank)))
        m["iteration_ids"] = [int(i) for i in t.get_iterations(int(rank))]
        kernels = gpu[gpu["cat"].isin(id_set(KERNEL_CATS))]
        m["kernel_count"] = len(kernels)
        m["memcpy_count"] = int(gpu["cat"].isin(id_set(MEMCPY_CATS)).sum())
        m["memset_count"] = int(gpu["cat"].isin(id_set(MEMSET_CATS)).sum())
        m["launch_count"] = int(cpu["name"].isin(id_set(LAUNCH_NAMES_HTA)).sum())
        m["gpu_event_count"] = len(gpu)
        cats = gpu.groupby("cat").size()
        m["gpu_events_by_cat"] = {str(sym_name(t, c)): int(n) for c, n in cats.items()}
        if "iteration" in df.columns and iterations:
            in_iter = kernels[kernels["iteration"].ge(0)]
            m["kernel_count_in_iterations"] = len(in_iter)
            n = m["iterations"]
            m["kernels_per_iteration"] = _num(len(in_iter) / n) if n else None
        m["kernel_us_median"] = _num(kernels["dur"].median()) if len(kernels) else None


def sym_name(t: Any, idx: int) -> str:
    return t.symbol_table.get_sym_table()[int(idx)]


def _launch_stats(analysis: Any, ranks: dict[str, dict[str, Any]]) -> None:
    got = analysis.get_cuda_kernel_launch_stats(ranks=[int(r) for r in ranks], visualize=False)
    for rank, df in got.items():
        m = ranks[str(rank)]["metrics"]
        if df is None or len(df) == 0:
            ranks[str(rank)]["skipped"]["launch_stats"] = "no cudaLaunchKernel/memcpy/memset"
            continue
        m["launch_stats"] = {
            "launches": len(df),
            "cpu_duration_us_median": _num(df["cpu_duration"].median()),
            "gpu_duration_us_median": _num(df["gpu_duration"].median()),
            "launch_delay_us_median": _num(df["launch_delay"].median()),
            "gpu_shorter_than_cpu": int((df["gpu_duration"] < df["cpu_duration"]).sum()),
            "cpu_duration_over_50us": int((df["cpu_duration"] > 50).sum()),
            "launch_delay_over_100us": int((df["launch_delay"] > 100).sum()),
        }


if __name__ == "__main__":
    raise SystemExit(main())
