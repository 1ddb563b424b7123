"""The oracle harness's views of perfdoctor's events as the tools select and count them
(benchmarks/_oracle_pd.py): HTA's event selection, tb_plugin's DataLoader figure."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.trace_events import parse_trace

from .synthetic_trace import write_trace

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pd_child = _module("_oracle_pd")


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    pid, tid = (0, 7) if cat in ("kernel", "gpu_memcpy", "gpu_user_annotation") else (1, 1)
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if args:
        event["args"] = args
    return event


def _launched(name: str, ts: float, dur: float, launch: float, corr: int) -> list[dict]:
    return [
        _x("cuda_runtime", "cudaLaunchKernel", launch, 2, correlation=corr),
        _x("kernel", name, ts, dur, correlation=corr, device=0, stream=7),
    ]


def test_one_step_keeps_the_whole_file_as_hta_does(tmp_path: Path) -> None:
    """With fewer than two ProfilerStep names HTA filters nothing: the kernels launched
    before the step (and one without a launch record) count, over first to last op."""
    events = [
        _x("user_annotation", "ProfilerStep#5", 1000, 1000),
        *_launched("warmup_gemm", 100, 100, 50, 1),  # launched before the step
        *_launched("step_gemm", 1100, 400, 1050, 2),
        _x("kernel", "orphan_copy_kernel", 1600, 100, device=0, stream=7),  # no launch
    ]
    ev = parse_trace(write_trace(tmp_path / "one.json", {"traceEvents": events}))
    view = pd_child.hta_view_of(ev)
    assert view.window_us == pytest.approx(1700 - 100)
    assert view.busy_frac == pytest.approx(600 / 1600)
    assert view.kernel_count == 3


def test_hta_last_step_counts_the_gpu_side_step_copies(tmp_path: Path) -> None:
    """The GPU runs behind: the gpu_user_annotation copy of the last step starts after the
    host's last step; HTA takes it for the last step and keeps what was launched before."""
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("user_annotation", "ProfilerStep#2", 1000, 1000),
        *_launched("k1", 100, 300, 10, 1),
        *_launched("k2", 1500, 300, 1100, 2),  # launched in the host's last step
        *_launched("k3", 2500, 300, 2100, 3),  # after it
        _x("gpu_user_annotation", "ProfilerStep#1", 100, 1300),
        _x("gpu_user_annotation", "ProfilerStep#2", 1500, 1300),
    ]
    ev = parse_trace(write_trace(tmp_path / "lag.json", {"traceEvents": events}))
    view = pd_child.hta_view_of(ev)
    # Launched before 1500 (the copy's start): k1 and k2, not k3.
    assert view.kernel_count == 2
    assert view.window_us == pytest.approx(1800 - 100)


def test_tb_dataloader_is_what_its_priority_order_leaves(tmp_path: Path) -> None:
    """tb_plugin: Kernel > Memcpy > Memset > Communication > Runtime > DataLoader. A
    DataLoader span of 500 us with a kernel running under 200 us of it counts 300."""
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("cpu_op", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 500),
        *_launched("k", 300, 400, 10, 1),
    ]
    path = write_trace(tmp_path / "dl.json", {"traceEvents": events})
    ev = parse_trace(path)
    assert pd_child.tb_dataloader_us_per_step(ev, runtime_seen=False) == pytest.approx(300)
    # The 2021 Runtime category is parsed by tb: the launch call (10-12) is claimed too.
    assert pd_child.tb_dataloader_us_per_step(ev, runtime_seen=True) == pytest.approx(298)
    assert pd_child.tb_view(path, ev) == {"dataloader_us_per_step": pytest.approx(300)}
