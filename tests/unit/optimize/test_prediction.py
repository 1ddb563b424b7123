"""dataloader-workers: the speedup the measured split predicts for the worker count, and that
prediction checked against the measurement (optimize/sizing.py, optimize/prediction.py), on
recorded numbers."""

from __future__ import annotations

import pytest

from perfdoctor.model import Facts, VariantResult
from perfdoctor.optimize.prediction import prediction_check, with_prediction
from perfdoctor.optimize.sizing import size_dataloader_workers

# The users' case (tests/unit/optimize/test_sizing.py): 43 ms of loading per batch against
# 6 ms of compute on 2 threads, 2 cores: 2 workers, 26.3 ms/batch predicted, 49 before.
USERS_CASE = Facts({"data_wait_ms_p50": 43.0, "step_ms_p50": 49.0, "torch_num_threads": 2})


def measured(speedup: float | None, interval: tuple[float, float] | None) -> VariantResult:
    return VariantResult(
        "dataloader-workers", ("dataloader-workers",), None, None, speedup, None, None, None,
        "accepted", "faster: ...", interval=interval,
    )  # fmt: skip


def test_the_split_predicts_what_the_sized_workers_buy() -> None:
    sizing = size_dataloader_workers(USERS_CASE, 2)
    assert sizing is not None and sizing.workers == 2
    assert sizing.predicted_speedup == pytest.approx(49.0 / 26.3, rel=0.01)
    assert sizing.predicted_from == "data 43 + compute 6.0 ms/batch -> 26 ms/batch with 2 workers"
    # The script's own workers lowered: nothing predicted.
    lowered = size_dataloader_workers(
        Facts({"dataloader_num_workers": 4, "data_wait_ms_p50": 30.0}), 2
    )
    assert lowered is not None and lowered.predicted_speedup is None


def test_a_prediction_inside_the_measured_interval_agrees() -> None:
    # The README's figures for the sample CNN: 61-66 ms/step, about 42 ms with workers.
    check = prediction_check(1.86, "the split", 1.55, (1.40, 1.90))
    assert check == (
        "predicted 1.86x from the split (the split), measured 1.55x [1.40x, 1.90x]: "
        "within the measured interval"
    )


def test_a_prediction_outside_it_says_which_way_the_split_was_wrong() -> None:
    over = prediction_check(1.88, "", 1.20, (1.10, 1.31))
    assert over.startswith("predicted 1.88x from the split, measured 1.20x [1.10x, 1.31x]: ")
    assert "over-predicts by 1.57x" in over
    under = prediction_check(1.10, "", 2.93, (2.50, 3.40))
    assert "under-predicts by 2.66x" in under
    assert "too few pairs" in prediction_check(1.5, "", 1.4, None)


def test_the_verdict_carries_the_check_and_no_prediction_changes_nothing() -> None:
    result = with_prediction(measured(1.70, (1.52, 1.90)), 1.88, "data 43 + compute 6.0")
    assert result.predicted_speedup == 1.88
    assert result.prediction_check is not None
    assert result.reason == f"faster: ...; {result.prediction_check}"
    plain = measured(1.70, (1.52, 1.90))
    assert with_prediction(plain, None, "") is plain
