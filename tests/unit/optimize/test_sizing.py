"""DataLoader workers sized from the baseline's measured split (optimize/sizing.py): the
variant changes num_workers alone, the intra-op threads stay the script's."""

from __future__ import annotations

import pytest

from perfdoctor.model import Facts
from perfdoctor.optimize.sizing import (
    WORKERS_ENV,
    WORKERS_WHY_ENV,
    Split,
    WorkerSizing,
    cpu_threads_target,
    default_workers,
    measured_split,
    predicted_batch_ms,
    size_dataloader_workers,
    sizing_env,
    worker_cap,
)


def facts(**values) -> Facts:
    return Facts(values)


# The users' case: 88% of each step waits for __getitem__ (43 ms loading vs 6 ms compute).
USERS_CASE = {"data_wait_ms_p50": 43.0, "step_ms_p50": 49.0, "torch_num_threads": 2}

# The GPU case: ~51 ms of CPU work per batch, a few ms of GPU step.
GPU_INPUT_BOUND = {
    "device_is_cuda": True,
    "dataloader_num_workers": 0,
    "data_wait_ms_p50": 51.2,
    "step_ms_p50": 55.3,
}


# (what the baseline measured, usable cores of one rank, workers sized)
CPU_TABLE = [
    # Loading dominates: every core loads, the main process mostly waits (1 worker: 43 ms
    # per batch, loading-bound; 2: 26 ms, CPU-bound: (43 + 9.6 ms of compute CPU) / 2).
    pytest.param(USERS_CASE, 2, 2, id="users-case-2-cores"),
    pytest.param({**USERS_CASE, "torch_num_threads": 4}, 4, 3, id="users-case-4-cores"),
    pytest.param({**USERS_CASE, "torch_num_threads": 8}, 8, 6, id="users-case-8-cores"),
    # Half the step loading on 2 cores: one worker keeps up (40 ms/batch predicted, CPU-bound);
    # a second would add nothing.
    pytest.param({"data_wait_ms_p50": 30.0, "step_ms_p50": 61.0}, 2, 1, id="balanced-2-cores"),
    # 50 ms loading, 20 ms compute on 16 threads: 3 workers hide the loading (16.7 ms per
    # batch) behind the compute (20.5 ms beside them); 2 would be loading-bound (25 ms).
    pytest.param(
        {"data_wait_ms_p50": 50.0, "step_ms_p50": 70.0, "torch_num_threads": 16},
        16,
        3,
        id="mixed-16-cores",
    ),
    # 50 ms loading vs 5 ms compute on 16 cores: 10 would load a batch per 5 ms, but the
    # compute's 16 threads beside 10 busy workers slow to 5.5 ms: 9 are within 3% of that.
    pytest.param(
        {"data_wait_ms_p50": 50.0, "step_ms_p50": 55.0, "torch_num_threads": 16},
        16,
        9,
        id="loading-16-cores",
    ),
    # Compute-bound: one worker hides 5 ms of loading behind 20 ms of compute.
    pytest.param(
        {"data_wait_ms_p50": 5.0, "step_ms_p50": 25.0, "torch_num_threads": 16},
        16,
        1,
        id="compute-bound-16-cores",
    ),
    # No compute left at all: every core loads.
    pytest.param({"data_wait_ms_p50": 60.0, "step_ms_p50": 55.0}, 8, 8, id="no-compute-8-cores"),
    # One core: one worker, nothing to split.
    pytest.param(USERS_CASE, 1, 1, id="one-core"),
    # A rank's share: 2 ranks on 8 cores size for 4 (the pipeline passes cores // ranks).
    pytest.param({**USERS_CASE, "ranks_launched": 2}, 4, 4, id="rank-share-of-8-cores"),
    # Gradient accumulation: per batch, not per step (4 batches of 43 + 6 ms).
    pytest.param(
        {
            "data_wait_ms_p50": 172.0,
            "step_ms_p50": 196.0,
            "micro_batches_per_step": 4.0,
            "torch_num_threads": 2,
        },
        2,
        2,
        id="accumulation-per-batch",
    ),
]


@pytest.mark.parametrize(("values", "cores", "workers"), CPU_TABLE)
def test_cpu_workers_from_the_measured_split(values, cores, workers):
    sizing = size_dataloader_workers(facts(**values), cores=cores)
    assert sizing is not None
    assert sizing.workers == workers
    assert 1 <= sizing.workers <= cores  # never beyond this rank's usable cores
    # One change: the child is told the worker count and why, nothing about threads.
    assert set(sizing.env()) == {WORKERS_ENV, WORKERS_WHY_ENV}
    assert "intra-op threads stay as the script has them" in sizing.summary


def test_users_case_reason_and_summary_say_which_change_is_whose():
    sizing = size_dataloader_workers(facts(**USERS_CASE), cores=2)
    assert sizing == WorkerSizing(
        2,
        "data 43 ms/batch vs 6.0 ms compute on 2 threads; 2 workers on 2 cores, "
        "26 ms/batch predicted (1 worker: 43)",
        "intra-op threads stay as the script has them, 2; 2 workers + 2 threads on 2 cores "
        "while it computes (23% of a batch): lowering the threads would be cpu-threads' "
        "change, a variant of its own",
        coupled_threads=1,  # what cpu-threads holds stacked with it: 2 cores - 2 workers, >= 1
        predicted_speedup=1.863,  # 49 ms before / 26.3 ms predicted (test_prediction.py)
        predicted_from="data 43 + compute 6.0 ms/batch -> 26 ms/batch with 2 workers",
    )
    assert sizing.summary.startswith("num_workers=2 (data 43 ms/batch")
    assert len(sizing.reason) <= 160  # the child's record keeps one line of 160


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (1, 43.0),  # loading-bound: one worker turns out a batch per 43 ms
        (2, 26.3),  # CPU-bound: (43 + 9.6) / 2 cores; loading alone would be 21.5
    ],
)
def test_predicted_batch_of_the_users_case(workers, expected):
    split = Split(data=43.0, compute=6.0, threads=2)
    assert predicted_batch_ms(split, workers, cores=2) == pytest.approx(expected, abs=0.05)


def test_busy_workers_slow_a_wide_compute():
    # 16 threads beside 10 workers that load all the time: the compute's fair share of 16
    # cores is below one core per thread, so it takes longer than the 5 ms it took alone.
    split = Split(data=50.0, compute=5.0, threads=16)
    assert predicted_batch_ms(split, 10, cores=16) > 5.4
    assert predicted_batch_ms(split, 1, cores=16) == pytest.approx(50.0)


def test_prediction_never_beats_the_cpu_bound():
    for data, compute, threads, cores in [(43, 6, 2, 2), (50, 20, 16, 16), (10, 40, 4, 4)]:
        split = Split(float(data), float(compute), threads)
        one_thread = compute / (0.25 + 0.75 / threads)
        for workers in range(1, cores + 1):
            bound = max(data / workers, (data + one_thread) / cores, compute)
            assert predicted_batch_ms(split, workers, cores) >= bound - 1e-6


def test_threads_not_measured_are_not_named():
    sizing = size_dataloader_workers(facts(data_wait_ms_p50=30.0, step_ms_p50=61.0), cores=2)
    assert sizing is not None
    assert sizing.note.startswith("intra-op threads stay as the script has them;")
    split = measured_split(facts(data_wait_ms_p50=30.0, step_ms_p50=61.0), cores=2)
    assert split == Split(30.0, 31.0, 2, threads_measured=False)


def test_other_processes_load_is_named():
    sizing = size_dataloader_workers(facts(**USERS_CASE, cpu_other_busy_cores=1.0), cores=2)
    assert sizing is not None and sizing.workers == 2
    assert sizing.note.endswith("other processes kept 1.0 cores busy in the baseline")


# --------------------------------------------------------------------------- CUDA runs


def test_cuda_run_gets_the_workers_that_keep_up():
    sizing = size_dataloader_workers(facts(**GPU_INPUT_BOUND), cores=16)
    # 51.2 / 4.1 = 12.5 -> 13, plus one spare; the launching thread keeps a core.
    assert sizing == WorkerSizing(
        14,
        "data 51 ms/batch vs 4.1 ms compute; 14 workers on 16 cores",
        "intra-op threads stay as the script has them",
        predicted_speedup=13.488,  # 55.3 ms before / the GPU's 4.1 ms, the loading kept up
        predicted_from="data 51 + compute 4.1 ms/batch -> 4.1 ms/batch with 14 workers",
    )


def test_cuda_cap_is_cores_less_one():
    assert worker_cap(16) == 15
    assert worker_cap(1) == 1
    sizing = size_dataloader_workers(
        facts(device_is_cuda=True, data_wait_ms_p50=100.0, step_ms_p50=102.0), cores=16
    )
    assert sizing is not None and sizing.workers == 15
    assert sizing.reason == (
        "data 100 ms/batch vs 2.0 ms compute; 15 workers on 16 cores "
        "(51 wanted, capped at cores - 1)"
    )


@pytest.mark.parametrize(
    ("values", "cores", "workers", "reason_start"),
    [
        ({"data_wait_ms_p50": 5.0, "step_ms_p50": 25.0}, 16, 2, "data 5.0 ms/batch vs 20 ms"),
        (
            {"data_wait_ms_p50": 0.0, "data_wait_frac": 0.0, "step_ms_p50": 20.0},
            16,
            1,
            "data 0.0 ms/batch vs 20 ms compute",
        ),
        ({"data_wait_ms_p50": 40.0, "step_ms_p50": 60.0}, 8, 3, "data 40 ms/batch vs 20 ms"),
        (
            {"data_wait_ms_p50": 200.0, "step_ms_p50": 220.0, "micro_batches_per_step": 4.0},
            32,
            11,
            "data 50 ms/batch vs 5.0 ms compute;",
        ),
        (  # the host spends 1 ms launching, the trace shows 4.4 ms of GPU work per step
            {
                "data_wait_ms_p50": 50.0,
                "step_ms_p50": 51.0,
                "gpu_busy_frac": 0.08,
                "trace_step_ms_p50": 55.0,
            },
            16,
            13,
            "data 50 ms/batch vs 4.4 ms compute;",
        ),
        (  # every other step waits 40 ms: the median wait is 0, the mean 20
            {
                "data_wait_ms_p50": 0.0,
                "data_wait_frac": 0.5,
                "step_ms_p50": 20.0,
                "step_ms_mean": 40.0,
            },
            8,
            2,
            "data 20 ms/batch vs 20 ms compute;",
        ),
        ({"data_wait_ms_p50": 60.0, "step_ms_p50": 55.0}, 8, 7, "data 60 ms/batch, no compute"),
    ],
)
def test_cuda_table(values, cores, workers, reason_start):
    sizing = size_dataloader_workers(facts(device_is_cuda=True, **values), cores=cores)
    assert sizing is not None and sizing.workers == workers
    assert sizing.reason.startswith(reason_start)


# --------------------------------------------------------------------------- not sized


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
    assert size_dataloader_workers(facts(**USERS_CASE, dataloader_num_workers=1), cores=2) is None


def test_cpu_threads_target_is_the_same_budget():
    settings = {"cpu": {"affinity_cores": 8}}
    assert cpu_threads_target(Facts({"dataloader_num_workers": 3}, settings=settings)) == 5
    assert cpu_threads_target(Facts({"cpu_cores_logical": 4, "ranks_launched": 2})) == 2
    assert cpu_threads_target(Facts({})) is None


def test_env_only_for_runs_that_add_workers():
    sizing = WorkerSizing(14, "data 51 ms/batch vs 4.1 ms compute")
    sizings = {"dataloader-workers": sizing}
    assert sizing_env(("dataloader-workers", "pin-memory"), sizings) == {
        WORKERS_ENV: "14",
        WORKERS_WHY_ENV: "data 51 ms/batch vs 4.1 ms compute",
    }
    assert sizing_env(("pin-memory",), sizings) == {}
    assert sizing_env(("dataloader-workers",), {}) == {}


@pytest.mark.parametrize(
    ("values", "cores", "coupled"),
    [
        (USERS_CASE, 2, 1),  # 2 workers + 2 threads on 2 cores
        ({**USERS_CASE, "torch_num_threads": 1}, 2, None),  # already the budget's 1 thread
        ({"data_wait_ms_p50": 60.0, "step_ms_p50": 55.0}, 8, None),  # no compute to share
        ({"data_wait_ms_p50": 5.0, "step_ms_p50": 25.0, "torch_num_threads": 4}, 16, None),
    ],
)
def test_coupled_threads_only_when_the_script_threads_oversubscribe(values, cores, coupled):
    sizing = size_dataloader_workers(facts(**values), cores=cores)
    assert sizing is not None and sizing.coupled_threads == coupled
    assert "THREADS" not in " ".join(sizing.env())


def test_script_workers_beyond_the_cores_are_sized_down() -> None:
    """makemore's and minGPT's 4 workers on 2 cores: the variant lowers the script's own
    count (the applier is told so: WORKERS_FEWER_ENV), to in-process loading."""
    from perfdoctor.optimize.sizing import WORKERS_FEWER_ENV, fewer_workers

    baseline = facts(dataloader_num_workers=4, data_wait_ms_p50=1.3, step_ms_p50=16.8)
    sizing = size_dataloader_workers(baseline, cores=2)
    assert sizing is not None and sizing.fewer and sizing.workers == 0
    assert sizing.env() == {
        WORKERS_ENV: "0",
        WORKERS_WHY_ENV: sizing.reason,
        WORKERS_FEWER_ENV: "1",
    }
    assert "4 workers on 2 cores" in sizing.reason and "4 -> 0" in sizing.reason
    # Workers that leave the training process a core are the script's to keep.
    assert fewer_workers(facts(dataloader_num_workers=1), cores=2) is None
    assert fewer_workers(facts(dataloader_num_workers=4), cores=8) is None
    assert fewer_workers(facts(dataloader_num_workers=0), cores=2) is None
    # A raising sizing never carries the flag.
    raised = size_dataloader_workers(facts(**USERS_CASE, dataloader_num_workers=0), cores=2)
    assert raised is not None and WORKERS_FEWER_ENV not in raised.env()


def test_the_re_run_is_not_skipped_for_script_workers_beyond_the_cores() -> None:
    from perfdoctor.optimize.policies import skip_workers_set_by_script

    two_cores = {"cpu_cores_logical": 2, "cpu_cores_physical": 2}
    assert skip_workers_set_by_script(facts(**two_cores, dataloader_num_workers=4), False) is None
    assert skip_workers_set_by_script(facts(**two_cores, dataloader_num_workers=1), False)
    assert skip_workers_set_by_script(facts(**two_cores, dataloader_num_workers=0), False) is None


def test_cpu_threads_sizes_down_beside_workers_and_busy_cores():
    """Both directions (issue 29): 4 workers on 2 cores, or other processes keeping a core
    busy, leave the intra-op threads one core; the applier gets the busy cores to leave."""
    from perfdoctor.optimize.policies import skip_threads_already_set
    from perfdoctor.optimize.sizing import THREADS_RESERVE_ENV, size_cpu_threads

    quiet = {"cpu_cores_logical": 2, "torch_num_threads": 2}
    assert cpu_threads_target(Facts(quiet)) == 2
    assert size_cpu_threads(Facts(quiet), 2) is None  # quiet: the applier's own count
    workers = Facts({**quiet, "dataloader_num_workers": 4})
    assert cpu_threads_target(workers) == 1
    assert skip_threads_already_set(workers, False) is None  # 2 -> 1 is worth a variant
    busy = Facts({**quiet, "cpu_other_busy_cores": 1.2})
    assert cpu_threads_target(busy) == 1
    sizing = size_cpu_threads(busy, 2)
    assert sizing is not None and sizing.env() == {THREADS_RESERVE_ENV: "1"}
    # Raising stays: 1 thread on 4 quiet cores goes up to 4.
    assert cpu_threads_target(Facts({"cpu_cores_logical": 4, "torch_num_threads": 1})) == 4
