"""Trace facts over hand-written traces whose every figure was worked out by hand.

cuda_two_steps.json: two 1000 µs steps; on device 0 the GPU is busy 460 µs (kernels
100-350 and 400-450, copies 830-840, 1040-1090, 1310-1320, Triton 1200-1250, NCCL
1900-1940) in a window of the two steps, 0-2000 µs. An op counts as queued once its launch
call returned. The gap 350-400 ends with a kernel queued at 75 µs, long before, and is longer
than a dispatch gap: a dependency wait (50 µs). Other gaps end with an op launched after the
gap began: host wait until its launch returned; where the op then waited more than 10 µs
to start, the rest is a dependency wait too (k1 at 100, queued at 55: 45 µs; Triton at 1200,
queued at 1105: 95 µs). After the last op (1940-2000) nothing is queued: host wait.
Host wait 55 + 380 + 200 + 15 + 60 + 580 + 60 = 1350, dependency wait 45 + 50 + 95 = 190.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfdoctor.analyze.trace import TraceSummary, load_trace


@pytest.fixture(scope="module")
def cuda() -> TraceSummary:
    return load_trace(Path(__file__).parent / "fixtures" / "cuda_two_steps.json")


def test_steps(cuda: TraceSummary) -> None:
    assert cuda.steps == 2
    assert cuda.step_numbers == (1, 2)
    assert cuda.step_ms_p50 == pytest.approx(1.0)


def test_gpu_busy_and_idle_split(cuda: TraceSummary) -> None:
    g = cuda.gpu
    assert g is not None and g.device == 0
    assert g.window_us == pytest.approx(2000)
    assert g.busy_frac == pytest.approx(460 / 2000)
    assert g.idle_dependency_wait_frac == pytest.approx(190 / 2000)
    assert g.idle_launch_gap_frac == 0
    assert g.idle_host_wait_frac == pytest.approx(1350 / 2000)
    assert g.comm_frac == g.comm_exposed_frac == pytest.approx(40 / 2000)
    assert g.comm_overlap_frac == 0


def test_kernels_launches_and_durations(cuda: TraceSummary) -> None:
    g = cuda.gpu
    assert g is not None
    assert g.kernels_per_step == pytest.approx(2.5)
    # three cudaLaunchKernel + one cuLaunchKernel (Triton, cuda_driver) + one for NCCL
    assert g.kernel_launches_per_step == pytest.approx(2.5)
    assert g.triton_kernels_per_step == pytest.approx(0.5)
    assert g.kernel_us_p50 == pytest.approx(50.0)


def test_tensor_core_share_counts_hopper_nvjet(cuda: TraceSummary) -> None:
    g = cuda.gpu
    assert g is not None
    assert g.tensor_core_kernel_frac == pytest.approx(200 / 390)  # nvjet only; sgemm is SIMT
    assert g.comm_kernel_frac == pytest.approx(40 / 390)


def test_memcpy_by_kind_and_pageable_copies(cuda: TraceSummary) -> None:
    g = cuda.gpu
    assert g is not None
    assert g.memcpy_ms_per_step["HtoD"] == pytest.approx(0.060 / 2)
    assert g.memcpy_ms_per_step["DtoH"] == pytest.approx(0.010 / 2)
    assert g.pageable_htod_count_per_step == pytest.approx(0.5)
    assert g.pageable_htod_frac == pytest.approx(3000 / 4000)


def test_host_syncs_count_device_reads_and_explicit_syncs_once(cuda: TraceSummary) -> None:
    # .item() at 810 (copy+sync inside: one sync), a read of a CPU tensor at 1510 (none),
    # cudaDeviceSynchronize at 1600 (one).
    assert cuda.host_syncs_per_step == pytest.approx(1.0)
    assert cuda.host_sync_ms_per_step == pytest.approx((80 + 50) / 1000 / 2)


def test_sync_attributed_to_the_user_function_not_the_library_frame(cuda: TraceSummary) -> None:
    (loc,) = cuda.locations["host_sync"]
    assert (loc.file, loc.line, loc.function) == ("train.py", 20, "train_step")
    assert loc.count == 1 and loc.share == pytest.approx(1.0)


def test_data_loading_time_by_function(cuda: TraceSummary) -> None:
    assert cuda.dataloader_ms_per_step == pytest.approx(8 / 1000 / 2)
    locs = cuda.locations["data_loading"]
    assert [(x.file, x.function) for x in locs] == [
        ("data.py", "__getitem__"),
        ("torch/utils/data/dataloader.py", "__next__"),
        ("torch/utils/data/_utils/collate.py", "collate_tensor_fn"),
    ]
    assert [x.share for x in locs] == pytest.approx([4 / 8, 1.5 / 8, 1.5 / 8])


def test_optimizer_and_zero_grad(cuda: TraceSummary) -> None:
    assert cuda.single_tensor_optimizer is True
    assert cuda.zero_grad_zeroing is True
    assert cuda.locations["zero_grad"][0].function == "train_step"


def test_precision_alignment_and_op_shares(cuda: TraceSummary) -> None:
    assert cuda.op_share_basis == "gpu_kernel_time"
    assert cuda.misaligned_lowp_gemm_count == 1  # bf16 addmm with 30-wide dims
    assert cuda.fp32_matmul_conv_frac == pytest.approx(0.0)
    assert cuda.matmul_frac == pytest.approx(300 / 390)  # kernels launched inside aten::linear
    assert cuda.conv_frac == pytest.approx(0.0)


def test_copies_of_tensors_just_created_on_the_cpu(cuda: TraceSummary) -> None:
    # aten::zeros then aten::to launching the pageable copy; the pinned copy at 1300 was
    # launched outside any to-device op.
    assert cuda.tensor_to_device_per_step == pytest.approx(0.5)
    assert cuda.locations["htod_copy"][0].function == "train_step"


def test_comm_share_of_step_time(cuda: TraceSummary) -> None:
    assert cuda.comm_frac == pytest.approx(50 / 2000)


def test_cpu_trace_without_stacks_or_gpu(fixtures: Path) -> None:
    s = load_trace(fixtures / "cpu_array_form.json")
    assert s.steps == 2 and s.step_numbers == (5, 6)
    assert s.gpu is None
    assert s.host_syncs_per_step is None  # nothing to wait for on a CPU-only trace
    assert s.has_stacks is False and s.locations == {}
    assert s.op_share_basis == "cpu_op_time"
    # op time in steps: mm 20 + conv 40 + foreach 2 + add 10 = 72 µs (the add at 400 is
    # outside the steps)
    assert s.conv_frac == pytest.approx(40 / 72)
    assert s.matmul_frac == pytest.approx(20 / 72)
    assert s.fp32_matmul_conv_frac == pytest.approx(20 / 72)
    assert s.single_tensor_optimizer is False  # _foreach_ op inside Optimizer.step
    assert s.zero_grad_zeroing is None
    assert s.aten_ops_per_step == pytest.approx(2.0)
    assert any("Python stacks" in n for n in s.notes)


def test_trace_without_profiler_steps_has_no_per_step_values(tmp_path: Path) -> None:
    path = tmp_path / "nosteps.json"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, '
        '"tid": 1, "ts": 0, "dur": 5}]}'
    )
    s = load_trace(path)
    assert s.steps == 0 and s.step_ms_p50 is None and s.aten_ops_per_step is None
    assert s.matmul_frac == pytest.approx(1.0)
    assert any("ProfilerStep" in n for n in s.notes)


def test_gpu_trace_without_profiler_steps_uses_the_span_of_gpu_work(
    fixtures: Path, tmp_path: Path
) -> None:
    data = json.loads((fixtures / "cuda_two_steps.json").read_text())
    data["traceEvents"] = [
        e for e in data["traceEvents"] if not e.get("name", "").startswith("ProfilerStep#")
    ]
    path = tmp_path / "nosteps.json"
    path.write_text(json.dumps(data))
    s = load_trace(path)
    assert s.steps == 0 and s.host_syncs_per_step is None
    assert s.gpu is not None and s.gpu.kernels_per_step is None
    # GPU work spans 100..1940 µs; 460 µs of it busy
    assert s.gpu.busy_frac == pytest.approx(460 / 1840)
    assert s.gpu.tensor_core_kernel_frac == pytest.approx(200 / 390)
    assert s.locations["host_sync"][0].function == "train_step"
