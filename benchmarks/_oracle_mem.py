"""Reference values of one CUDA memory snapshot pickle, from PyTorch's own torch.cuda._memory_viz.

    python benchmarks/_oracle_mem.py SNAPSHOT.pickle

Run by oracle.py with a Python that has torch (CPU is enough). The corpus pickles are trusted
data, so plain pickle.load is used here, as `python -m torch.cuda._memory_viz` does;
perfdoctor itself reads them with its restricted unpickler. Prints one JSON object.

What comes from where:
- segsum_*: the numbers `python -m torch.cuda._memory_viz stats FILE` prints (segsum), taken
  from its own text output; they describe the allocator state when the snapshot was taken.
- peak_*: _memory_viz.py computes no peak (its trace_plot hands the data to MemoryViz.js);
  these replay device_traces the way MemoryViz.js process_alloc_data does (the Active
  Memory Timeline, and with plot_segments the Active Cached Segment Timeline): the initial
  state is every free without a matching alloc in the trace plus every active block (or
  segment) in the snapshot without an alloc in the trace; alloc adds e.size, free /
  free_completed removes it; the peak is the highest total.
- top sites: the `memory` flamegraph lines (_write_blocks over every block of every
  segment: "stream;state;frames size"), active_allocated only, grouped by the innermost
  frame that is a .py file (site_py) or a .py file outside torch and site-packages (site_user).
"""

from __future__ import annotations

import json
import pickle
import re
import sys
from typing import Any

TOP_N = 10


def main() -> int:
    path = sys.argv[1]
    out: dict[str, Any] = {"metrics": {}, "skipped": {}}
    try:
        import torch
        import torch.cuda._memory_viz as mv

        out["version"] = f"torch {torch.__version__} torch.cuda._memory_viz"
        with open(path, "rb") as fh:
            data = pickle.load(fh)  # trusted corpus file; see the module docstring
        if isinstance(data, list):  # segments only, as _memory_viz's own _read handles it
            data = {"segments": data, "traces": []}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
        sys.stdout.write(json.dumps(out) + "\n")
        return 0

    m = out["metrics"]
    m.update(_segsum(mv, data))
    for device, trace in enumerate(data.get("device_traces", [])):
        if not trace:
            continue
        m[f"device{device}_trace_entries"] = len(trace)
        m[f"device{device}_peak_allocated_bytes"] = _peak(data, device, segments=False)
        m[f"device{device}_peak_reserved_bytes"] = _peak(data, device, segments=True)
    if not any(data.get("device_traces", [])):
        out["skipped"]["peaks"] = "no device_traces (snapshot taken without _record_memory_history)"
    m.update(_sites(data))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def _segsum(mv: Any, data: dict[str, Any]) -> dict[str, Any]:
    text = mv.segsum(data)
    found = dict(
        re.findall(r"^(segments|total_reserved|total_allocated|total_free): (.*)$", text, re.M)
    )
    res: dict[str, Any] = {"segsum_segments": int(found["segments"])}
    res["segsum_total_reserved_printed"] = found["total_reserved"].strip()
    res["segsum_total_allocated_printed"] = found["total_allocated"].strip()
    res["segsum_total_free_printed"] = found["total_free"].strip()
    # The same sums in exact bytes, with segsum's own helpers (_block_extra gives the
    # requested size of an active block; the rest of the block is internal free space).
    reserved = allocated = free_external = free_internal = 0
    for seg in data["segments"]:
        reserved += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                _, size = mv._block_extra(b)
                allocated += size
                free_internal += b["size"] - size
            else:
                free_external += b["size"]
    res["segsum_total_reserved_bytes"] = reserved
    res["segsum_total_allocated_bytes"] = allocated
    res["segsum_free_external_bytes"] = free_external
    res["segsum_free_internal_bytes"] = free_internal
    # Live blocks at their allocated (rounded) size: reserved minus the free blocks.
    res["segsum_allocated_block_bytes"] = allocated + free_internal
    # The exact sums must print as segsum printed them.
    res["segsum_exact_matches_printed"] = (
        repr(mv.Bytes(reserved)) == res["segsum_total_reserved_printed"]
        and repr(mv.Bytes(allocated)) == res["segsum_total_allocated_printed"]
    )
    res["segsum_active_blocks"] = sum(
        1 for s in data["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
    )
    res["segsum_largest_segment_bytes"] = max(
        (s["total_size"] for s in data["segments"]), default=0
    )
    return res


def _peak(data: dict[str, Any], device: int, segments: bool) -> int:
    alloc = "segment_alloc" if segments else "alloc"
    frees = ("segment_free",) if segments else ("free", "free_completed")
    live: dict[int, int] = {}
    initial = 0
    deltas: list[int] = []
    for e in data["device_traces"][device]:
        if e["action"] == alloc:
            live[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif e["action"] in frees:
            if e["addr"] in live:
                deltas.append(-live.pop(e["addr"]))
            else:  # allocated before the ring buffer starts: live from the beginning
                initial += e["size"]
                deltas.append(-e["size"])
    for seg in data["segments"]:
        if seg.get("device", device) != device:
            continue
        if segments:
            if seg["address"] not in live:
                initial += seg["total_size"]
        else:
            for b in seg["blocks"]:
                if b["state"] == "active_allocated" and b["address"] not in live:
                    initial += b["requested_size"]
    total = peak = initial
    for d in deltas:
        total += d
        peak = max(peak, total)
    return peak


def _sites(data: dict[str, Any]) -> dict[str, Any]:
    import torch.cuda._memory_viz as mv

    lines = mv.memory(data, format_flamegraph=lambda text: text).splitlines()
    active_bytes = sum(
        int(line.rsplit(" ", 1)[1])
        for line in lines
        if ";active_allocated;" in line and ";active_allocated;<gaps> " not in line
    )
    by_py: dict[str, int] = {}
    by_user: dict[str, int] = {}
    for seg in data["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            frames, size = mv._block_extra(b)
            py = [f for f in frames if str(f["filename"]).endswith(".py")]
            user = [
                f
                for f in py
                if "/torch/" not in f["filename"] and "site-packages" not in f["filename"]
            ]
            key_py = _fmt(py[0]) if py else "<no python frame>"
            key_user = _fmt(user[0]) if user else "<no user frame>"
            by_py[key_py] = by_py.get(key_py, 0) + size
            by_user[key_user] = by_user.get(key_user, 0) + size

    def top(d: dict[str, int]) -> list[dict[str, Any]]:
        ranked = sorted(
            ((k, v) for k, v in d.items() if not k.startswith("<")), key=lambda kv: -kv[1]
        )
        return [{"site": k, "bytes": v} for k, v in ranked[:TOP_N]]

    return {
        "flamegraph_active_bytes": active_bytes,
        "top_sites_py": top(by_py),
        "top_sites_user": top(by_user),
        # Live bytes whose stack has no such frame (allocated before recording, or in C++).
        "no_python_frame_bytes": by_py.get("<no python frame>", 0),
        "no_user_frame_bytes": by_user.get("<no user frame>", 0),
    }


def _fmt(frame: dict[str, Any]) -> str:
    return f"{frame['filename']}:{frame['line']}:{frame['name']}"


if __name__ == "__main__":
    raise SystemExit(main())
