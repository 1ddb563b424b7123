from __future__ import annotations

from typing import Any

import pytest

from perfdoctor.analyze.samples import summarize_samples, timed_window
from perfdoctor.run_schema import ProgressRow, SampleRow, known_sample, progress_row

from .run_dir_builder import _samples


def typed(rows: list[dict[str, Any]]) -> list[SampleRow]:
    """Sample rows as load_run decodes them."""
    return [r for r in map(known_sample, rows) if r is not None]


def progress(*rows: tuple[str, float]) -> list[ProgressRow]:
    return [progress_row({"step": i, "phase": p, "t": t}) for i, (p, t) in enumerate(rows)]


def test_timed_window_runs_from_the_end_of_warmup_to_the_last_timed_step() -> None:
    rows = progress(
        ("warmup", 1.0), ("warmup", 1.2), ("timed", 1.4), ("timed", 2.0), ("profiled", 2.5)
    )
    assert timed_window(rows) == ((1.2, 2.0), 2)


def test_timed_window_without_warmup_skips_the_first_step() -> None:
    rows = progress(("timed", 1.0), ("timed", 1.5), ("timed", 2.0))
    assert timed_window(rows) == ((1.0, 2.0), 2)
    assert timed_window(progress(("warmup", 1.0))) == (None, 0)


def test_summary_over_the_window() -> None:
    s = summarize_samples(typed(_samples()), (1.2, 2.0), 4)
    assert s.gpu_samples == 4 and s.cpu_samples == 4
    assert s.gpu_util_mean_frac == pytest.approx(0.8)
    assert s.gpu_power_w_mean == pytest.approx(300.0)
    # the counter rises 1000 J/s: 0.8 s -> 800 J over 4 steps
    assert s.energy_j_per_step == pytest.approx(200.0)
    assert s.gpu_throttled_frac == pytest.approx(0.25)  # 0x4 power cap once; 0x1 idle is not
    assert s.sm_active_frac == pytest.approx(0.5) and s.tensor_active_frac == pytest.approx(0.25)
    assert s.cpu_util_mean_frac == pytest.approx(0.75)
    assert s.cpu_busy_cores == pytest.approx(1.5)
    assert s.child_cpu_cores == pytest.approx(1.2)
    assert s.notes == ("GPU 0: pcie_tx_kbs not sampled (NotSupported)",)


def test_cores_busy_outside_the_run() -> None:
    rows = [
        # 2 cores: the machine is fully busy, the child uses 0.6 and its workers 0.2 cores.
        {"kind": "cpu", "t": 1.0, "cpu_percent": [100.0, 100.0], "child_cpu_percent": 60.0,
         "workers_cpu_percent": 20.0},
        {"kind": "cpu", "t": 1.1, "cpu_percent": [100.0, 60.0], "child_cpu_percent": 60.0},
        # read a moment apart, the child's counter can exceed the machine's: clipped at 0
        {"kind": "cpu", "t": 1.2, "cpu_percent": [50.0, 0.0], "child_cpu_percent": 70.0},
        {"kind": "cpu", "t": 1.3, "cpu_percent": [50.0, 0.0]},  # no child reading: skipped
    ]  # fmt: skip
    s = summarize_samples(typed(rows), None, 0)
    assert s.other_busy_cores == pytest.approx((1.2 + 1.0 + 0.0) / 3)
    assert s.cpu_cores == 2


def test_cpu_only_samples_have_no_gpu_values() -> None:
    rows = [r for r in _samples() if r["kind"] != "gpu"]
    s = summarize_samples(typed(rows), None, 0)
    assert s.gpu_util_mean_frac is None and s.energy_j_per_step is None
    assert s.cpu_samples == 5  # no window: every sample


# Recorded under `perfdoctor profile --nproc-per-node 2` (ddp_train.py, a 2-core machine):
# the child is torchrun's launcher agent, idle, and the two ranks are its descendants.
TORCHRUN_ROWS = [
    {"kind": "cpu", "t": 1.7196, "cpu_percent": [100.0, 100.0], "rss_bytes": 234172416,
     "child_cpu_percent": 0.0, "workers": 2, "workers_rss_bytes": 82223104,
     "workers_cpu_percent": 140.2},
    {"kind": "cpu", "t": 1.8195, "cpu_percent": [100.0, 100.0], "rss_bytes": 234172416,
     "child_cpu_percent": 0.0, "workers": 2, "workers_rss_bytes": 180301824,
     "workers_cpu_percent": 120.2},
    {"kind": "cpu", "t": 1.9197, "cpu_percent": [100.0, 100.0], "rss_bytes": 234172416,
     "child_cpu_percent": 0.0, "workers": 2, "workers_rss_bytes": 218836992,
     "workers_cpu_percent": 139.6},
    {"kind": "cpu", "t": 2.0195, "cpu_percent": [100.0, 100.0], "rss_bytes": 234172416,
     "child_cpu_percent": 0.0, "workers": 2, "workers_rss_bytes": 285995008,
     "workers_cpu_percent": 80.2},
]  # fmt: skip


def test_the_run_cores_count_every_process_perfdoctor_started() -> None:
    """Under torchrun the launcher agent (the child) idles while its ranks train: the run's
    cores are the whole tree's, as the cores left to other processes already were."""
    s = summarize_samples(typed(TORCHRUN_ROWS), None, 0)
    ranks = (140.2 + 120.2 + 139.6 + 80.2) / 4 / 100.0
    assert s.child_cpu_cores == pytest.approx(ranks)  # was 0.0: the agent alone
    assert s.other_busy_cores == pytest.approx(2.0 - ranks)
    assert s.child_cpu_cores + s.other_busy_cores == pytest.approx(s.cpu_busy_cores)


def test_the_run_cores_count_other_ranks_listed_apart() -> None:
    # Ranks started beside the child (their pids given to the sampler as peers).
    row = {"kind": "cpu", "t": 1.0, "cpu_percent": [100.0, 100.0], "child_cpu_percent": 90.0,
           "workers_cpu_percent": 10.0, "ranks": 1, "ranks_cpu_percent": 80.0}  # fmt: skip
    s = summarize_samples(typed([row]), None, 0)
    assert s.child_cpu_cores == pytest.approx(1.8)
    assert s.other_busy_cores == pytest.approx(0.2)
