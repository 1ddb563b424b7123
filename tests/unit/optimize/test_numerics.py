"""The numerics guard over hand-made loss trajectories."""

from __future__ import annotations

import math

import pytest

from perfdoctor.optimize.numerics import (
    baseline_spread,
    check_losses,
    derive_tolerance,
    describe_tolerance,
    drift,
    first_non_finite,
    loss_tolerance,
    reference_trajectory,
)

BASE = [2.0 - 0.03 * i for i in range(30)]


def scaled(series, factor):
    return [v * factor for v in series]


def test_identical_trajectories_pass_with_zero_drift():
    check = check_losses([BASE], [list(BASE)], 1e-4)
    assert check.ok and check.checked
    assert check.max_drift == 0.0 and check.loss_delta == 0.0


def test_small_noise_within_tolerance_passes():
    noisy = [v * (1 + (3e-3 if i % 2 else -3e-3)) for i, v in enumerate(BASE)]
    assert check_losses([BASE], [noisy], 1e-2).ok  # bf16-sized noise, low-precision tolerance
    assert not check_losses([BASE], [noisy], 1e-4).ok  # the same noise breaks an exact change


def test_nan_is_rejected_with_its_step():
    variant = list(BASE)
    variant[7] = math.nan
    check = check_losses([BASE], [variant], 1e-2)
    assert not check.ok
    assert check.non_finite_step == 7
    assert check.reason == "loss is NaN at step 7 (baseline finite)"


def test_inf_is_rejected_but_a_nan_the_baseline_shares_is_not_the_variants_fault():
    variant = list(BASE)
    variant[3] = math.inf
    assert "+inf at step 3" in check_losses([BASE], [variant], 1e-2).reason
    both = list(BASE)
    both[3] = math.nan
    assert first_non_finite(both, both) is None


def test_systematic_drift_is_rejected_with_where_it_peaked():
    drifting = [v * (1 + 0.002 * i) for i, v in enumerate(BASE)]
    check = check_losses([BASE], [drifting], 1e-2)
    assert not check.ok
    assert check.drift_step is not None and check.drift_step > 20
    assert "drifts" in check.reason
    # The tolerance is stated with what it was derived from, as `compare` states it.
    assert "(tolerance 1.0e-02 = max(low-precision category 1.0e-02, 2 x the baseline's " in (
        check.reason
    )


def test_final_window_offset_is_caught_even_when_late():
    late = list(BASE[:-6]) + scaled(BASE[-6:], 1.05)  # the final window: last fifth
    measured = drift(late, BASE)
    assert measured.final == pytest.approx(0.05, rel=1e-6)
    assert not check_losses([BASE], [late], 1e-2).ok


def test_the_derived_tolerance_names_its_category_factor_and_spread():
    other_baseline = scaled(BASE, 1.01)
    derived = loss_tolerance("exact", 1e-4, [BASE, other_baseline])
    assert derived.value == derive_tolerance(1e-4, [BASE, other_baseline])
    assert derived.category == "exact" and derived.spread_factor == 2.0
    assert derived.baseline_runs == 2
    assert describe_tolerance(derived) == (
        f"tolerance {derived.value:.1e} = max(exact category 1.0e-04, 2 x the baseline's "
        f"run-to-run loss spread {derived.baseline_spread:.1e} over 2 runs)"
    )
    check = check_losses([BASE, other_baseline], [BASE], 1e-2)
    assert check.derived is not None and check.derived.category == "low-precision"


def test_baseline_spread_widens_the_tolerance():
    other_baseline = [v * (1 + (0.01 if i % 3 else -0.01)) for i, v in enumerate(BASE)]
    spread = baseline_spread([BASE, other_baseline])
    assert spread > 0
    assert derive_tolerance(1e-4, [BASE, other_baseline]) == pytest.approx(2 * spread)
    assert derive_tolerance(1e-1, [BASE, other_baseline]) == 1e-1
    assert derive_tolerance(1e-4, [BASE]) == 1e-4


def test_reference_is_the_per_step_median_and_skips_missing_values():
    reference = reference_trajectory([[1.0, None, 3.0], [2.0, 5.0], [3.0, 6.0, math.nan]])
    assert reference == [2.0, 5.5, 3.0]


def test_missing_losses_leave_numerics_unchecked():
    check = check_losses([[None, None]], [[None]], 1e-2)
    assert check.ok and not check.checked
    assert "not captured" in check.reason


def test_loss_near_zero_does_not_blow_up_relative_differences():
    base = [1.0, 0.5, 0.1, 1e-6, 1e-7]
    variant = [1.0, 0.5, 0.1, 2e-6, 1e-7]
    assert check_losses([base], [variant], 1e-2).ok
