"""DataLoader workers and intra-op threads sized together from one CPU budget
(optimize/sizing.py)."""

from __future__ import annotations

import pytest

from perfdoctor.model import Facts
from perfdoctor.optimize.sizing import (
    THREADS_ENV,
    WORKERS_ENV,
    WORKERS_WHY_ENV,
    WorkerSizing,
    cpu_threads_target,
    default_workers,
    predicted_batch_ms,
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


def test_cuda_run_gets_the_workers_that_keep_up_and_the_main_process_the_rest():
    sizing = size_dataloader_workers(facts(**GPU_INPUT_BOUND), cores=16)
    # 51.2 / 4.1 = 12.5 -> 13, plus one spare; 16 - 14 cores left for the intra-op threads.
    assert sizing == WorkerSizing(
        14, 2, "data 51 ms/batch vs 4.1 ms compute; 14 workers + 2 threads on 16 cores"
    )


def test_cuda_cap_is_cores_less_one():
    assert worker_cap(16) == 15
    assert worker_cap(1) == 1
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=100.0, step_ms_p50=102.0), cores=16
    )
    assert sizing == WorkerSizing(
        15,
        1,
        "data 100 ms/batch vs 2.0 ms compute; 51 wanted, capped at cores - 1; "
        "15 workers + 1 thread on 16 cores",
    )


@pytest.mark.parametrize(
    ("values", "cores"),
    [
        (GPU_INPUT_BOUND, 16),
        ({**GPU_INPUT_BOUND, "device_is_cuda": False}, 16),
        ({"data_wait_ms_p50": 30.0, "step_ms_p50": 61.0}, 2),
        ({"data_wait_ms_p50": 50.0, "step_ms_p50": 70.0, "torch_num_threads": 16}, 16),
        ({"data_wait_ms_p50": 60.0, "step_ms_p50": 55.0}, 8),
        ({"data_wait_ms_p50": 5.0, "step_ms_p50": 25.0, "device_is_cuda": True}, 4),
    ],
)
def test_workers_and_threads_never_exceed_the_usable_cores(values, cores):
    sizing = size_dataloader_workers(facts(**values), cores=cores)
    assert sizing is not None
    assert sizing.workers >= 1 and sizing.threads >= 1
    assert sizing.workers + sizing.threads == cores


def test_cpu_run_splits_the_cores_where_the_slower_side_is_fastest():
    # 50 ms of loading and 20 ms of compute on 16 threads: 3 workers load a batch per
    # 16.7 ms while 13 threads compute it in 20.7 ms; 2 workers would take 25 ms, and 4
    # workers leave 12 threads (21.1 ms).
    cpu = facts(data_wait_ms_p50=50.0, step_ms_p50=70.0, torch_num_threads=16)
    sizing = size_dataloader_workers(cpu, cores=16)
    assert sizing == WorkerSizing(
        3,
        13,
        "data 50 ms/batch vs 20 ms compute; 3 workers + 13 threads on 16 cores, "
        "the fastest split (21 ms/batch predicted)",
    )
    for workers in (2, 4):
        assert predicted_batch_ms(50.0, 20.0, 16, workers, 16 - workers) > 20.7


def test_cpu_run_on_two_cores_gets_one_worker_and_one_thread():
    # The measured CNN case: half the step waiting for data on 2 cores. Two workers beside
    # two threads would run four busy processes on two cores.
    two = facts(device_is_cuda=False, data_wait_ms_p50=30.0, step_ms_p50=61.0)
    sizing = size_dataloader_workers(two, cores=2)
    assert sizing is not None and (sizing.workers, sizing.threads) == (1, 1)


def test_one_core_is_oversubscribed_by_one_and_says_so():
    sizing = size_dataloader_workers(facts(data_wait_ms_p50=40.0, step_ms_p50=60.0), cores=1)
    assert sizing is not None and (sizing.workers, sizing.threads) == (1, 1)
    assert "on 1 core (oversubscribed by one: the least possible)" in sizing.reason


def test_unknown_device_is_treated_as_cpu():
    sizing = size_dataloader_workers(facts(data_wait_ms_p50=51.2, step_ms_p50=55.3), cores=16)
    assert sizing is not None and "the fastest split" in sizing.reason


def test_little_data_work_needs_few_workers():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=5.0, step_ms_p50=25.0), cores=16
    )
    assert sizing is not None and (sizing.workers, sizing.threads) == (2, 14)


def test_no_data_wait_gives_one_worker():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=0.0, data_wait_frac=0.0, step_ms_p50=20.0),
        cores=16,
    )
    assert sizing is not None and (sizing.workers, sizing.threads) == (1, 15)
    assert sizing.reason.startswith("data 0.0 ms/batch vs 20 ms compute")


def test_missing_facts_leave_the_default_to_the_child():
    assert size_dataloader_workers(facts(), cores=16) is None
    assert size_dataloader_workers(facts(device_is_cuda=True, step_ms_p50=20.0), cores=16) is None
    assert size_dataloader_workers(facts(data_wait_ms_p50=20.0), cores=16) is None
    assert size_dataloader_workers({"data_wait_ms_p50": 5.0, "step_ms_p50": 0.0}, cores=4) is None
    # Without timing the child keeps a core for the main process too: min(4, cores - 1).
    assert default_workers(16) == 4 and default_workers(2) == 1 and default_workers(0) == 1


def test_a_baseline_with_workers_is_not_sized_again():
    with_workers = {**GPU_INPUT_BOUND, "dataloader_num_workers": 2}
    assert size_dataloader_workers(facts(**with_workers), cores=16) is None


def test_exact_ratio_does_not_round_up_twice():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=40.0, step_ms_p50=60.0), cores=8
    )
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
    assert sizing is not None and sizing.workers == 11
    assert sizing.reason.startswith("data 50 ms/batch vs 5.0 ms compute;")


def test_gpu_work_overlapping_the_load_counts_as_compute():
    # The host only spends 1 ms launching, but the trace shows 4.4 ms of GPU work per step.
    values = {**GPU_INPUT_BOUND, "data_wait_ms_p50": 50.0, "step_ms_p50": 51.0}
    sizing = size_dataloader_workers(
        facts(**values, gpu_busy_frac=0.08, trace_step_ms_p50=55.0), cores=16
    )
    assert sizing is not None and sizing.workers == 13
    assert sizing.reason.startswith("data 50 ms/batch vs 4.4 ms compute;")


def test_bursty_waits_count_by_their_mean():
    # Every other step waits 40 ms: the median wait is 0, the mean 20.
    sizing = size_dataloader_workers(
        facts(
            device_is_cuda=True,
            data_wait_ms_p50=0.0,
            data_wait_frac=0.5,
            step_ms_p50=20.0,
            step_ms_mean=40.0,
        ),
        cores=8,
    )
    assert sizing is not None and sizing.workers == 2
    assert sizing.reason.startswith("data 20 ms/batch vs 20 ms compute;")


def test_no_compute_left_takes_the_cap():
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=60.0, step_ms_p50=55.0), cores=8
    )
    assert sizing == WorkerSizing(
        7, 1, "data 60 ms/batch, no compute left; 7 workers + 1 thread on 8 cores"
    )


def test_cpu_threads_target_is_the_same_budget():
    settings = {"cpu": {"affinity_cores": 8}}
    assert cpu_threads_target(Facts({"dataloader_num_workers": 3}, settings=settings)) == 5
    assert cpu_threads_target(Facts({"cpu_cores_logical": 4, "ranks_launched": 2})) == 2
    assert cpu_threads_target(Facts({})) is None


def test_env_only_for_runs_that_add_workers():
    sizing = WorkerSizing(14, 2, "data 51 ms/batch vs 4.1 ms compute")
    sizings = {"dataloader-workers": sizing}
    assert sizing_env(("dataloader-workers", "pin-memory"), sizings) == {
        WORKERS_ENV: "14",
        THREADS_ENV: "2",
        WORKERS_WHY_ENV: "data 51 ms/batch vs 4.1 ms compute",
    }
    assert sizing_env(("pin-memory",), sizings) == {}
    assert sizing_env(("dataloader-workers",), {}) == {}
