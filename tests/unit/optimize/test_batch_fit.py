"""Batch planning's arithmetic (optimize/batch_fit.py): the fit, the limit, the check's
batch and the fastest batch within memory."""

from __future__ import annotations

import pytest

from perfdoctor.optimize import batch_fit
from perfdoctor.optimize.batch_fit import CurvePoint, MemoryFit, MemoryPoint

MIB = 2**20


def test_fit_recovers_fixed_and_per_sample_and_predicts_an_unmeasured_batch() -> None:
    # The figures of gpt_char_lm.py on the development machine (RSS train peaks).
    points = [
        MemoryPoint(16, 389_730_304),
        MemoryPoint(32, 437_895_168),
        MemoryPoint(64, 534_413_312),
    ]
    fit = batch_fit.fit_memory(points)
    assert fit is not None and fit.points == 3
    assert fit.per_sample_bytes == pytest.approx(3.01e6, rel=0.01)
    assert fit.fixed_bytes == pytest.approx(341.5e6, rel=0.01)
    assert fit.worst_residual_frac < 0.001
    # batch 128 measured 729,485,312 bytes: within 15% (in fact 0.3%).
    assert abs(batch_fit.prediction_error(fit.predict(128), 729_485_312)) < 0.01


def test_fit_needs_two_distinct_batches_and_never_slopes_down() -> None:
    assert batch_fit.fit_memory([MemoryPoint(8, 100), MemoryPoint(8, 120)]) is None
    assert batch_fit.fit_memory([MemoryPoint(8, 100)]) is None
    flat = batch_fit.fit_memory([MemoryPoint(8, 1000), MemoryPoint(16, 990)])
    assert flat is not None and flat.per_sample_bytes == 0.0


def test_limit_sources() -> None:
    gib = 2**30
    assert batch_fit.memory_limit_bytes(
        on_cuda=True, device_total=80 * gib, available=None, user_limit=None
    ) == (int(80 * gib * 0.95), "device memory less 5%")
    assert batch_fit.memory_limit_bytes(
        on_cuda=False, device_total=None, available=10 * gib, user_limit=None
    )[0] == int(10 * gib * 0.9)
    assert batch_fit.memory_limit_bytes(
        on_cuda=False, device_total=None, available=10 * gib, user_limit=gib
    ) == (gib, "--memory-limit")
    assert (
        batch_fit.memory_limit_bytes(
            on_cuda=True, device_total=None, available=None, user_limit=None
        )[0]
        is None
    )


def test_max_batch() -> None:
    fit = MemoryFit(100 * MIB, 10 * MIB, 3, 0.0)
    assert batch_fit.max_batch(fit, 200 * MIB) == 10
    assert batch_fit.max_batch(fit, 205 * MIB) == 10
    assert batch_fit.max_batch(fit, 50 * MIB) == 0  # not even the fixed part fits
    assert batch_fit.max_batch(MemoryFit(100 * MIB, 0.0, 2, 0.0), 200 * MIB) is None


def test_measurement_batches() -> None:
    assert batch_fit.measurement_batches(32) == (16, 32, 64)
    assert batch_fit.measurement_batches(1) == (1, 2)
    assert batch_fit.measurement_batches(3) == (2, 3, 6)


def test_verification_batch_prefers_a_near_limit_else_an_unmeasured_size() -> None:
    assert batch_fit.verification_batch(32, (16, 32, 64), 100) == (100, "at the predicted limit")
    assert batch_fit.verification_batch(32, (16, 32, 64), 64) == (
        63,
        "just below the predicted limit",
    )
    far = batch_fit.verification_batch(32, (16, 32, 64), 6729)
    assert far == (128, "a batch not measured for the fit")
    assert batch_fit.verification_batch(32, (16, 32, 64), None) == (
        128,
        "a batch not measured for the fit",
    )
    assert batch_fit.verification_batch(32, (16, 32, 64), 0) is None


def _curve() -> list[CurvePoint]:
    return [
        CurvePoint(16, 40.0, 390 * MIB),
        CurvePoint(32, 55.0, 440 * MIB),
        CurvePoint(64, 70.0, 530 * MIB),
        CurvePoint(128, 90.0, 730 * MIB),
    ]


def test_fastest_within_memory_is_by_samples_per_second() -> None:
    assert batch_fit.fastest_within(_curve(), None, 32).batch == 128  # type: ignore[union-attr]
    # 128 does not fit under 600 MiB: 64 is the fastest that does.
    assert batch_fit.fastest_within(_curve(), 600 * MIB, 32).batch == 64  # type: ignore[union-attr]
    # A crashed run is never chosen.
    curve = [*_curve()[:3], CurvePoint(128, 90.0, 730 * MIB, ok=False)]
    assert batch_fit.fastest_within(curve, None, 32).batch == 64  # type: ignore[union-attr]
    assert batch_fit.fastest_within(_curve(), 100 * MIB, 32) is None


def test_the_script_batch_stays_unless_another_beats_it_clearly() -> None:
    curve = [CurvePoint(32, 100.0, 10), CurvePoint(64, 104.0, 20)]
    assert batch_fit.fastest_within(curve, None, 32).batch == 32  # type: ignore[union-attr]
    curve = [CurvePoint(32, 100.0, 10), CurvePoint(64, 106.0, 20)]
    assert batch_fit.fastest_within(curve, None, 32).batch == 64  # type: ignore[union-attr]


def test_keep_effective_batch_only_takes_divisors() -> None:
    best = batch_fit.fastest_within(_curve(), None, 32, keep_effective=64)
    assert best is not None and best.batch == 64
    assert batch_fit.accumulation_steps(64, 16) == 4
    assert batch_fit.accumulation_steps(64, 48) is None


def _fit_and_check(
    points: list[MemoryPoint], check: MemoryPoint
) -> tuple[batch_fit.Confidence, str]:
    fit = batch_fit.fit_memory(points)
    assert fit is not None
    error = batch_fit.prediction_error(fit.predict(check.batch), check.peak_bytes)
    return batch_fit.prediction_confidence([*points, check], fit, check.batch, error, rss=True)


def test_confidence_confirmed_when_the_check_lands_and_the_slope_matters() -> None:
    # gpt_char_lm.py: the per-sample part is ~half the peak at 64; batch 128 within 0.3%.
    points = [
        MemoryPoint(16, 389_730_304),
        MemoryPoint(32, 437_895_168),
        MemoryPoint(64, 534_413_312),
    ]
    level, why = _fit_and_check(points, MemoryPoint(128, 729_485_312))
    assert level == "confirmed" and "within 15%" in why


def test_confidence_weak_when_the_fixed_part_alone_would_pass() -> None:
    # tabular_mlp_debug.py: 12 KiB per sample beside ~350 MiB of process.
    points = [
        MemoryPoint(128, 346 * MIB + 1_500_000),
        MemoryPoint(256, 346 * MIB + 3_100_000),
        MemoryPoint(512, 346 * MIB + 6_200_000),
    ]
    level, why = _fit_and_check(points, MemoryPoint(1024, 353 * MIB))
    assert level == "weak" and "fixed part alone" in why


def test_confidence_unreliable_across_the_mmap_threshold_names_the_cause() -> None:
    # word_language_model (pytorch/examples) on this CPU: linear over 10/20/40, then batch
    # 80's largest tensors (41 MB) cross glibc's 32 MiB mmap threshold (benchmarks/README.md).
    points = [
        MemoryPoint(10, int(421.46 * MIB)),
        MemoryPoint(20, int(461.63 * MIB)),
        MemoryPoint(40, int(519.77 * MIB)),
    ]
    level, why = _fit_and_check(points, MemoryPoint(80, int(545.66 * MIB)))
    assert level == "unreliable" and "less than linearly" in why and "mmap threshold" in why
    # The earlier session, where batch 80 peaked below batch 40: the fall is named too.
    level, why = _fit_and_check(
        [MemoryPoint(10, int(400.5 * MIB)), MemoryPoint(20, int(448.3 * MIB)),
         MemoryPoint(40, int(563.3 * MIB))],
        MemoryPoint(80, int(539.9 * MIB)),
    )  # fmt: skip
    assert level == "unreliable" and "fell from batch 40 to 80" in why
    # On CUDA the RSS reasoning does not apply.
    fit = batch_fit.fit_memory(points)
    assert fit is not None
    level, why = batch_fit.prediction_confidence(points, fit, 80, 0.3, rss=False)
    assert level == "unreliable" and "mmap" not in why
    level, why = batch_fit.prediction_confidence(points, fit, 80, -0.3, rss=False)
    assert level == "unreliable" and "faster than linearly" in why


def test_confidence_unchecked_without_a_check() -> None:
    fit = MemoryFit(100.0, 1.0, 3, 0.0)
    assert batch_fit.prediction_confidence([], fit, None, None, rss=True)[0] == "unchecked"


def test_a_missed_check_is_refitted_and_checked_once_more() -> None:
    # word_language_model: the first fit missed batch 80 by +19%; the refit with batch 80
    # (424 MiB + 1.7 MiB per sample) is checked at 160, whose measured RSS peak was 726 MiB.
    points = [
        MemoryPoint(10, int(421.46 * MIB)),
        MemoryPoint(20, int(461.63 * MIB)),
        MemoryPoint(40, int(519.77 * MIB)),
        MemoryPoint(80, int(545.66 * MIB)),
    ]
    first = batch_fit.fit_memory(points[:3])
    refit = batch_fit.fit_memory(points)
    assert first is not None and refit is not None
    miss = batch_fit.prediction_error(first.predict(80), points[3].peak_bytes)
    assert batch_fit.recheck_batch(80, [10, 20, 40, 80], None) == 160
    again = batch_fit.prediction_error(refit.predict(160), int(725.7 * MIB))
    assert abs(again) < 0.15
    level, why = batch_fit.prediction_confidence(
        points, first, 80, miss, rss=True, recheck=(160, again)
    )
    assert level == "confirmed" and "mmap threshold" in why and "batch 160" in why
    level, why = batch_fit.prediction_confidence(
        points, first, 80, miss, rss=True, recheck=(160, 0.4)
    )
    assert level == "unreliable" and "beyond 15% again" in why


def test_recheck_batch_stays_below_the_refit_limit() -> None:
    assert batch_fit.recheck_batch(80, [10, 20, 40, 80], 120) == 120
    assert batch_fit.recheck_batch(80, [10, 20, 40, 80], 80) is None  # no room above
    assert batch_fit.recheck_batch(80, [10, 20, 40, 80, 160], None) is None  # measured
