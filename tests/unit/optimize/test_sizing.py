"""DataLoader worker sizing from the baseline's timing (optimize/sizing.py)."""

from __future__ import annotations

from perfdoctor.model import Facts
from perfdoctor.optimize.sizing import (
    WORKERS_ENV,
    WORKERS_WHY_ENV,
    WorkerSizing,
    default_workers,
    size_dataloader_workers,
    sizing_env,
    worker_cap,
)


def facts(**values) -> Facts:
    return Facts(values)


# The GPU case from the brief: ~51 ms of CPU work per batch, a few ms of GPU step.
GPU_INPUT_BOUND = {
    "device_is_cuda": True,
    "dataloader_num_workers": 0,
    "data_wait_ms_p50": 51.2,
    "step_ms_p50": 55.3,
}


def test_cuda_run_gets_the_workers_that_keep_up():
    sizing = size_dataloader_workers(facts(**GPU_INPUT_BOUND), cores=16)
    # 51.2 / 4.1 = 12.5 -> 13, plus one spare.
    assert sizing == WorkerSizing(14, "data 51 ms/batch vs 4.1 ms compute")


def test_cuda_cap_is_cores_less_one():
    assert worker_cap(16, cuda=True) == 15
    assert worker_cap(1, cuda=True) == 1
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=100.0, step_ms_p50=102.0), cores=16
    )
    assert sizing is not None and sizing.workers == 15
    assert sizing.reason == (
        "data 100 ms/batch vs 2.0 ms compute; 51 wanted, "
        "capped at 15: 16 cores less one for the main process"
    )


def test_cpu_cap_keeps_min_4_cores():
    assert worker_cap(16, cuda=False) == 4
    assert worker_cap(2, cuda=False) == 2
    cpu = {**GPU_INPUT_BOUND, "device_is_cuda": False}
    sizing = size_dataloader_workers(facts(**cpu), cores=16)
    assert sizing is not None and sizing.workers == 4
    assert "capped at 4: min(4, 16 cores) on a CPU run" in sizing.reason
    # The measured CNN case: half the step waiting for data on 2 cores -> 2 workers.
    two = facts(device_is_cuda=False, data_wait_ms_p50=30.0, step_ms_p50=61.0)
    assert size_dataloader_workers(two, cores=2) == WorkerSizing(
        2, "data 30 ms/batch vs 31 ms compute"
    )


def test_unknown_device_is_treated_as_cpu():
    sizing = size_dataloader_workers(facts(data_wait_ms_p50=51.2, step_ms_p50=55.3), cores=16)
    assert sizing is not None and sizing.workers == 4


def test_little_data_work_needs_few_workers():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=5.0, step_ms_p50=25.0), cores=16
    )
    assert sizing == WorkerSizing(2, "data 5.0 ms/batch vs 20 ms compute")


def test_no_data_wait_gives_one_worker():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=0.0, data_wait_frac=0.0, step_ms_p50=20.0),
        cores=16,
    )
    assert sizing == WorkerSizing(1, "data 0.0 ms/batch vs 20 ms compute")


def test_missing_facts_leave_the_default_to_the_child():
    assert size_dataloader_workers(facts(), cores=16) is None
    assert size_dataloader_workers(facts(device_is_cuda=True, step_ms_p50=20.0), cores=16) is None
    assert size_dataloader_workers(facts(data_wait_ms_p50=20.0), cores=16) is None
    assert size_dataloader_workers({"data_wait_ms_p50": 5.0, "step_ms_p50": 0.0}, cores=4) is None
    assert default_workers(16) == 4 and default_workers(2) == 2 and default_workers(0) == 1


def test_a_baseline_with_workers_is_not_sized_again():
    with_workers = {**GPU_INPUT_BOUND, "dataloader_num_workers": 2}
    assert size_dataloader_workers(facts(**with_workers), cores=16) is None


def test_exact_ratio_does_not_round_up_twice():
    sizing = size_dataloader_workers(facts(data_wait_ms_p50=40.0, step_ms_p50=60.0), cores=8)
    assert sizing is not None and sizing.workers == 3  # 40 / 20 = 2, plus one spare


def test_gradient_accumulation_is_per_batch():
    sizing = size_dataloader_workers(
        facts(
            device_is_cuda=True,
            data_wait_ms_p50=200.0,
            step_ms_p50=220.0,
            micro_batches_per_step=4.0,
        ),
        cores=32,
    )
    assert sizing == WorkerSizing(11, "data 50 ms/batch vs 5.0 ms compute")


def test_gpu_work_overlapping_the_load_counts_as_compute():
    # The host only spends 1 ms launching, but the trace shows 4.4 ms of GPU work per step.
    values = {**GPU_INPUT_BOUND, "data_wait_ms_p50": 50.0, "step_ms_p50": 51.0}
    sizing = size_dataloader_workers(
        facts(**values, gpu_busy_frac=0.08, trace_step_ms_p50=55.0), cores=16
    )
    assert sizing == WorkerSizing(13, "data 50 ms/batch vs 4.4 ms compute")


def test_bursty_waits_count_by_their_mean():
    # Every other step waits 40 ms: the median wait is 0, the mean 20.
    sizing = size_dataloader_workers(
        facts(data_wait_ms_p50=0.0, data_wait_frac=0.5, step_ms_p50=20.0, step_ms_mean=40.0),
        cores=8,
    )
    assert sizing == WorkerSizing(2, "data 20 ms/batch vs 20 ms compute")


def test_no_compute_left_takes_the_cap():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=60.0, step_ms_p50=55.0), cores=8
    )
    assert sizing is not None and sizing.workers == 7
    assert sizing.reason.startswith("data 60 ms/batch, no compute left; capped at 7")


def test_env_only_for_runs_that_add_workers():
    sizing = WorkerSizing(14, "data 51 ms/batch vs 4.1 ms compute")
    assert sizing_env(("dataloader-workers", "pin-memory"), sizing) == {
        WORKERS_ENV: "14",
        WORKERS_WHY_ENV: "data 51 ms/batch vs 4.1 ms compute",
    }
    assert sizing_env(("pin-memory",), sizing) == {}
    assert sizing_env(("dataloader-workers",), None) == {}
