"""The gain promised for launch overhead is at most what the window's launches cost the host:
launches x the trace's mean launch call (or a typical 20 µs when it times none). The rest of
the host-busy idle time is host work, named as such, with no gain from compile or graphs."""

from __future__ import annotations

import pytest

from perfdoctor.model import Finding, Scalar
from perfdoctor.rules import evaluate
from perfdoctor.rules.launch_cost import CAP_EVIDENCE, OPS_CAP_EVIDENCE, TYPICAL_LAUNCH_US

from .factsets import make_facts

# hta_critical_path_alexnet: 95 launches of 11.6 µs in a 12.9 s window with the GPU busy
# 0.5% and the host busy the rest; its median kernel is long enough that launch-bound is quiet.
ALEXNET: dict[str, Scalar] = {
    "gpu_busy_frac": 0.005,
    "gpu_idle_host_wait_frac": 0.995,
    "gpu_idle_host_busy_frac": 0.994,
    "gpu_idle_host_sync_frac": 0.0002,
    "gpu_idle_host_unrecorded_frac": 0.0005,
    "gpu_idle_dependency_wait_frac": 0.0,
    "gpu_window_ms": 12920.0,
    "gpu_window_launch_count": 95,
    "launch_call_us_mean": 11.6,
    "kernel_us_p50": 60.0,
}


def _finding(facts_overrides: dict[str, Scalar], rule_id: str) -> Finding:
    findings = evaluate(make_facts("gpu", **facts_overrides)).findings
    (found,) = [f for f in findings if rule_id in (f.rule_id, *f.related)]
    return found


def _evidence(finding: Finding, name: str) -> tuple[float, str]:
    (e,) = [e for e in finding.evidence if e.name == name]
    assert isinstance(e.value, float)
    return e.value, e.note


def test_set_up_work_in_a_long_window_is_not_launch_overhead() -> None:
    idle = _finding(ALEXNET, "gpu-underutilized")
    assert idle.rule_id == "gpu-underutilized"
    assert "host work between launches" in idle.title
    assert idle.optimizations == ()
    assert idle.gain is not None and idle.gain.step_time_frac is None
    assert "not launch overhead" in idle.gain.method
    launches, note = _evidence(idle, CAP_EVIDENCE)
    assert launches == 95
    # 95 x 11.6 µs = 1.10 ms of 12,920 ms: 0.0085%.
    assert "95 kernel/memcpy launches x 11.6 µs" in note and "1.10 ms" in note
    assert "0.0085%" in note
    assert not [
        f
        for f in evaluate(make_facts("gpu", **ALEXNET)).findings
        if f.gain and (f.gain.step_time_frac or 0) > 0.01
    ]


def test_many_launches_keep_the_whole_host_busy_share_as_launch_overhead() -> None:
    """5000 launches x 10 µs = 50 ms of a 100 ms window: more than the 40% host busy, so
    nothing is capped: the gain is the host-busy share, as before."""
    facts = {
        **ALEXNET,
        "gpu_busy_frac": 0.45,
        "gpu_idle_host_wait_frac": 0.41,
        "gpu_idle_host_busy_frac": 0.40,
        "gpu_window_ms": 100.0,
        "gpu_window_launch_count": 5000,
        "launch_call_us_mean": 10.0,
    }
    idle = _finding(facts, "gpu-underutilized")
    assert "kernel launch overhead" in idle.title
    assert "compile-cudagraphs" in idle.optimizations
    assert idle.gain is not None and idle.gain.step_time_frac == pytest.approx(0.40)
    assert CAP_EVIDENCE not in {e.name for e in idle.evidence}


def test_the_launch_gain_is_capped_when_launches_explain_part_of_the_host_time() -> None:
    """2000 launches x 20 µs (no launch call timed: the typical cost) = 40 ms of a 100 ms
    window, of 60% host busy: launch overhead, the biggest cause, promises 40%, not 60%."""
    facts = {
        **ALEXNET,
        "gpu_busy_frac": 0.35,
        "gpu_idle_host_wait_frac": 0.62,
        "gpu_idle_host_busy_frac": 0.60,
        "gpu_window_ms": 100.0,
        "gpu_window_launch_count": 2000,
        "launch_call_us_mean": None,
        "kernel_us_p50": 60.0,
    }
    assert TYPICAL_LAUNCH_US == 20.0
    idle = _finding(facts, "gpu-underutilized")
    assert "kernel launch overhead" in idle.title
    assert idle.gain is not None and idle.gain.step_time_frac == pytest.approx(0.40)
    assert "at most what launches cost the host" in idle.gain.method
    _, note = _evidence(idle, CAP_EVIDENCE)
    assert "typical" in note


def test_launch_bound_promises_only_what_launches_cost() -> None:
    """Short kernels (launch-bound's case) and 90% host busy, but 300 launches x 10 µs are
    3% of the 100 ms window: not launch-bound; gpu-underutilized names the host work."""
    facts = {
        **ALEXNET,
        "gpu_busy_frac": 0.08,
        "gpu_idle_host_wait_frac": 0.91,
        "gpu_idle_host_busy_frac": 0.90,
        "gpu_window_ms": 100.0,
        "gpu_window_launch_count": 300,
        "launch_call_us_mean": 10.0,
        "kernel_us_p50": 6.0,
    }
    findings = evaluate(make_facts("gpu", **facts)).findings
    assert "launch-bound" not in {f.rule_id for f in findings}
    idle = _finding(facts, "gpu-underutilized")
    assert "host work between launches" in idle.title
    # With 2000 launches the same host time is 20% launches: launch-bound fires, promising 20%.
    launch = _finding({**facts, "gpu_window_launch_count": 2000}, "launch-bound")
    assert launch.rule_id == "launch-bound"
    assert launch.gain is not None and launch.gain.step_time_frac == pytest.approx(0.20)


def test_host_work_that_dwarfs_its_launches_still_promises_the_launches_share() -> None:
    """hta_nccl_parser_config_nccl_data: 3660 launches x 9.5 µs = 34.8 ms of a 667 ms window
    (5.2%) beside 73.5% host busy: the host's work is the biggest cause, and compile/graphs
    are recommended for the 5.2% the launches cost, not for the 73.5%."""
    facts = {
        **ALEXNET,
        "gpu_busy_frac": 0.236,
        "gpu_idle_host_wait_frac": 0.762,
        "gpu_idle_host_busy_frac": 0.735,
        "gpu_window_ms": 667.0,
        "gpu_window_launch_count": 3660,
        "launch_call_us_mean": 9.5,
    }
    idle = _finding(facts, "gpu-underutilized")
    assert "host work between launches" in idle.title
    assert "compile-cudagraphs" in idle.optimizations
    assert idle.gain is not None
    assert idle.gain.step_time_frac == pytest.approx(3660 * 9.5 / 667e3, abs=1e-3)
    assert "none for the host's other work" in idle.gain.method


def test_the_launching_ops_host_time_caps_the_gain_when_the_trace_has_it() -> None:
    """hta_df_index_resolver: 21,410 launches x 8 µs are 9.8% of the 1,738 ms window, but the
    ops that launch them hold the host 94% of it: CUDA graphs remove their whole host path,
    so the 39% host busy is not capped and launch-bound promises it."""
    facts = {
        **ALEXNET,
        "gpu_busy_frac": 0.576,
        "gpu_idle_host_wait_frac": 0.41,
        "gpu_idle_host_busy_frac": 0.39,
        "gpu_window_ms": 1738.0,
        "gpu_window_launch_count": 21410,
        "launch_call_us_mean": 8.0,
        "launch_ops_host_frac": 0.94,
        "kernel_us_p50": 6.0,
    }
    launch = _finding(facts, "launch-bound")
    assert launch.gain is not None and launch.gain.step_time_frac == pytest.approx(0.39)
    assert OPS_CAP_EVIDENCE not in {e.name for e in launch.evidence}
    # Where the launching ops hold the host less than it is busy, they are the cap.
    capped = _finding({**facts, "launch_ops_host_frac": 0.2}, "launch-bound")
    assert capped.gain is not None and capped.gain.step_time_frac == pytest.approx(0.2)
    value, note = _evidence(capped, OPS_CAP_EVIDENCE)
    assert value == pytest.approx(0.2)
    assert "what CUDA graphs remove at most" in note and "347.60 ms" in note
    assert "launching ops' host time" in capped.gain.method
