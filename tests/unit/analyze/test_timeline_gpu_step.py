"""Part 8 of issue 22: the GPU-side step from the ProfilerStep copies on the GPU timeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze.trace import load_trace
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import gpu_view

from .gpu_corpus import corpus_dir
from .synthetic_trace import input_bound_trace, write_trace
from .timeline_traces import gpu_lagging_steps

AMD = "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def test_the_gpu_side_step_is_the_gpu_copies_start_to_start(tmp_path: Path) -> None:
    t = load_trace(write_trace(tmp_path / "t.json", gpu_lagging_steps(4)))
    assert t.step_ms_p50 == pytest.approx(2.0, abs=0.01)  # the host's spans
    f = t.timeline_facts
    assert f["gpu_step_count"] == 4
    assert f["gpu_step_ms_p50"] == pytest.approx(10.0, abs=0.05)


def test_the_section_shows_it_when_the_gpu_lags(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", gpu_lagging_steps(4))
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    text = gpu_view.window_text(done.report)
    assert "GPU-side step 10" in text and "host runs ahead" in text


def test_no_gpu_copies_no_gpu_step(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", input_bound_trace())
    assert load_trace(path).timeline_facts["gpu_step_ms_p50"] is None
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    assert "GPU-side step" not in gpu_view.window_text(done.report)


def test_a_single_short_gpu_copy_is_not_called_a_lag(tmp_path: Path) -> None:
    """The MI250 trace: one ProfilerStep copy of 1 ms on the GPU inside a 4.7 ms host step
    (the GPU idles most of the step): no GPU-side step line."""
    root = corpus_dir()
    if root is None or not (root / "traces" / AMD).is_file():
        pytest.skip("shared GPU corpus not found")
    f = load_trace(root / "traces" / AMD).timeline_facts
    assert f["gpu_step_count"] == 1
    assert f["gpu_step_ms_p50"] == pytest.approx(1.03, abs=0.02)
    (done,) = diagnose_traces([root / "traces" / AMD], tmp_path)
    assert done.report is not None
    assert "GPU-side step" not in gpu_view.window_text(done.report)
