"""Make a large Kineto trace by repeating the profiler steps of a real one.

Used by the analysis-speed benchmarks (issue 7, P2) and for checking that the parser's cost
grows linearly. The steps of a real trace are copied again and again with shifted
timestamps and renumbered ids (ProfilerStep#N, External id, Python id and parent id,
correlation, flow ids), so the result has the same event mix as the original, only longer.

    python tools/make_big_trace.py --size-mb 200 -o /tmp/big.pt.trace.json
    python tools/make_big_trace.py --from run/x.pt.trace.json.gz --size-mb 50 -o big.json.gz
    python tools/make_big_trace.py --size-mb 200 --synthetic-gpu -o /tmp/big_gpu.pt.trace.json

Without --from, a base trace is recorded here by a small CPU training loop with
record_shapes, with_stack and profile_memory (this needs torch). --synthetic-gpu adds a
cudaLaunchKernel and a kernel for every leaf CPU op, so the GPU code paths of the analysis
are exercised on a machine without a GPU; the kernel timings are invented, only their
volume is realistic.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_KEYS = ("External id", "Python id", "correlation")


def record_base_trace(out_dir: Path, steps: int = 4) -> Path:
    """A real CPU trace of a small training loop whose data loading does Python work."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Noisy(Dataset):
        def __len__(self) -> int:
            return 8 * (steps + 3)

        def __getitem__(self, i: int):
            x = torch.randn(3, 16, 16)
            for _ in range(3):
                x = x * 1.01
            return x, torch.tensor(i % 10)

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 16 * 16, 10),
    )
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    loader = DataLoader(Noisy(), batch_size=8)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=steps, repeat=1)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        schedule=sched,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out_dir)),
    )
    prof.start()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss.item()
        prof.step()
    prof.stop()
    found = sorted(out_dir.glob("*.pt.trace.json*"))
    if not found:
        raise SystemExit("the profiler wrote no trace")
    return found[-1]


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    return data if isinstance(data, dict) else {"traceEvents": data}


def _max_ids(events: list[dict[str, Any]]) -> dict[str, int]:
    top = {key: 0 for key in _ID_KEYS}
    top["flow"] = 0
    for ev in events:
        args = ev.get("args")
        if isinstance(args, dict):
            for key in _ID_KEYS:
                value = args.get(key)
                if isinstance(value, int) and value > top[key]:
                    top[key] = value
        if ev.get("ph") in ("s", "f") and isinstance(ev.get("id"), int):
            top["flow"] = max(top["flow"], ev["id"])
    return top


def _add_synthetic_gpu(events: list[dict[str, Any]], device_pid: int = 0) -> None:
    """Give every leaf CPU op a launch and a kernel, serialised on one stream."""
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
        key=lambda e: (e["tid"], e["ts"]),
    )
    corr = 1
    stream_free_at = 0.0
    added: list[dict[str, Any]] = []
    for i, op in enumerate(ops):
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        is_leaf = not (
            nxt is not None and nxt["tid"] == op["tid"] and nxt["ts"] < op["ts"] + op["dur"]
        )
        if not is_leaf:
            continue
        launch_ts = op["ts"] + op["dur"] * 0.3
        launch_dur = min(3.0, op["dur"] * 0.5)
        ext = (op.get("args") or {}).get("External id", 0)
        added.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": op["pid"],
                "tid": op["tid"],
                "ts": launch_ts,
                "dur": launch_dur,
                "args": {"External id": ext, "cbid": 211, "correlation": corr},
            }
        )
        start = max(stream_free_at, launch_ts + launch_dur + 2.0)
        dur = max(1.0, op["dur"] * 0.4)
        name = (
            "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN"
            if "mm" in op["name"]
            else "void at::native::vectorized_elementwise_kernel<4>"
        )
        added.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": device_pid,
                "tid": 7,
                "ts": start,
                "dur": dur,
                "args": {
                    "External id": ext,
                    "device": device_pid,
                    "stream": 7,
                    "correlation": corr,
                    "registers per thread": 32,
                    "grid": [128, 1, 1],
                    "block": [256, 1, 1],
                },
            }
        )
        stream_free_at = start + dur
        corr += 1
    events.extend(added)


def _shift(
    ev: dict[str, Any],
    k: int,
    period: float,
    steps: int,
    top: dict[str, int],
    block_python_ids: set[int],
) -> dict[str, Any]:
    out = copy.copy(ev)
    out["ts"] = ev["ts"] + k * period
    m = _STEP.match(ev.get("name", ""))
    if m:
        out["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
    args = ev.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in _ID_KEYS:
            if isinstance(args.get(key), int):
                args[key] += k * (top[key] + 1)
        parent = args.get("Python parent id")
        if isinstance(parent, int) and parent in block_python_ids:
            args["Python parent id"] = parent + k * (top["Python id"] + 1)
        out["args"] = args
    if ev.get("ph") in ("s", "f") and isinstance(ev.get("id"), int):
        out["id"] = ev["id"] + k * (top["flow"] + 1)
    return out


def make_big_trace(base: Path, out: Path, size_mb: float, synthetic_gpu: bool = False) -> dict:
    data = _load(base)
    events: list[dict[str, Any]] = data["traceEvents"]
    if synthetic_gpu:
        _add_synthetic_gpu(events)
        data.setdefault("deviceProperties", [])
        if not data["deviceProperties"]:
            data["deviceProperties"] = [
                {"id": 0, "name": "synthetic", "computeMajor": 9, "computeMinor": 0}
            ]
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and _STEP.match(e.get("name", ""))
    ]
    if not spans:
        raise SystemExit(f"{base}: no ProfilerStep spans to repeat")
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    period = end - start
    steps = len(spans)
    block = [e for e in events if "ts" in e and start <= e["ts"] < end]
    rest = [e for e in events if not ("ts" in e and start <= e["ts"] < end)]
    block_python_ids = {
        e["args"]["Python id"]
        for e in block
        if isinstance(e.get("args"), dict) and isinstance(e["args"].get("Python id"), int)
    }
    top = _max_ids(events)
    block_bytes = sum(len(json.dumps(e)) + 2 for e in block)
    reps = max(1, round(size_mb * 1e6 / max(block_bytes, 1)))
    # Spans that enclose the repeated steps (the script's frames, the profiler window) grow
    # with them, so the python stack still nests around every copy.
    for ev in rest:
        if ev.get("ph") == "X" and ev["ts"] < start and ev["ts"] + ev.get("dur", 0) >= end:
            ev["dur"] = ev["dur"] + (reps - 1) * period
        elif "ts" in ev and ev["ts"] >= end:
            ev["ts"] = ev["ts"] + (reps - 1) * period
    header = {k: v for k, v in data.items() if k != "traceEvents"}
    opener = gzip.open if out.name.endswith(".gz") else open
    count = 0
    with opener(out, "wt") as fh:
        fh.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        first = True
        for ev in rest:
            fh.write(("" if first else ",\n") + json.dumps(ev))
            first = False
            count += 1
        for k in range(reps):
            for ev in block:
                fh.write(",\n" + json.dumps(_shift(ev, k, period, steps, top, block_python_ids)))
                count += 1
        fh.write("\n]}\n")
    return {"events": count, "steps": steps * reps, "repeats": reps, "path": str(out)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="base", type=Path, help="a real trace to repeat")
    parser.add_argument("--size-mb", type=float, default=200.0, help="uncompressed size")
    parser.add_argument("--synthetic-gpu", action="store_true", help="add launches+kernels")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = args.base or record_base_trace(Path(tmp))
        info = make_big_trace(base, args.out, args.size_mb, args.synthetic_gpu)
    size = args.out.stat().st_size / 1e6
    sys.stdout.write(
        f"{info['path']}: {size:.1f} MB on disk, {info['events']} events, "
        f"{info['steps']} steps ({info['repeats']} repeats)\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
