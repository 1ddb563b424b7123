"""The worker count's prediction checked against the measurement.

`dataloader-workers` is sized from the baseline's measured split of data and compute time
per batch (optimize/sizing.py), which predicts what the workers buy: the baseline's time per
batch over the predicted one. After the A/B, the verdict says whether the measurement
bears the prediction out: "predicted 1.88x from the split (...), measured 1.70x [1.52x,
1.90x]: within the measured interval". A prediction outside the interval says which way
the model of the split was wrong (the workers' start-up and hand-off, or threads and workers
contending for the cores, which the model does not see; or a wait the split did not count).

Pure: no torch.
"""

from __future__ import annotations

from dataclasses import replace

from perfdoctor.model import VariantResult


def prediction_check(
    predicted: float, basis: str, measured: float | None, interval: tuple[float, float] | None
) -> str:
    """One line: the prediction, the measurement, and whether they agree."""
    head = (
        f"predicted {predicted:.2f}x from the split ({basis})"
        if basis
        else (f"predicted {predicted:.2f}x from the split")
    )
    if measured is None:
        return f"{head}; nothing measured to check it against"
    if interval is None:
        return f"{head}, measured {measured:.2f}x (too few pairs for an interval to check it)"
    low, high = interval
    seen = f"{head}, measured {measured:.2f}x [{low:.2f}x, {high:.2f}x]"
    if low <= predicted <= high:
        return f"{seen}: within the measured interval"
    if predicted > high:
        return (
            f"{seen}: the split over-predicts by {predicted / measured:.2f}x (the workers' "
            "start-up and hand-off, or workers and threads contending for the cores)"
        )
    return (
        f"{seen}: the split under-predicts by {measured / predicted:.2f}x (waits the split "
        "did not count as data time)"
    )


def with_prediction(result: VariantResult, predicted: float | None, basis: str) -> VariantResult:
    """`result` with the prediction and its check (unchanged without a prediction)."""
    if predicted is None or predicted <= 0:
        return result
    check = prediction_check(predicted, basis, result.speedup, result.interval)
    return replace(
        result,
        predicted_speedup=predicted,
        prediction_check=check,
        reason=f"{result.reason}; {check}",
    )
