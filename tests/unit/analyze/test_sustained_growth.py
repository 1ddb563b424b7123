"""Memory growth that lasts (a leak) is told apart from allocator warm-up that settles, and
from step-to-step scatter that only looks like a slope."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfdoctor.analyze.growth import sustained_growth as _sustained_growth

MIB = 2**20


def test_warmup_then_plateau_is_not_growth() -> None:
    # Measured shape of a healthy CPU run: RSS climbs for a few steps, then jitters flat.
    # (gpt_char_lm.py timed steps, MiB, torch 2.13 CPU.)
    rss = [386.0, 388.5, 411.4, 398.5, 398.5, 405.2, 410.2, 413.2, 417.2, 417.2]
    rss += [417.2, 404.4, 418.2, 418.2, 418.2, 418.2, 418.2, 418.2, 418.1, 408.3]
    points = [(float(i), v * MIB) for i, v in enumerate(rss)]
    slope, _ = _sustained_growth(points)
    assert slope is not None and abs(slope) < 64 * 1024


def test_linear_leak_is_measured_exactly_despite_a_jump() -> None:
    points = [(float(i), 400 * MIB + i * 389 * 1024) for i in range(20)]
    points[15] = (15.0, points[15][1] - 30 * MIB)  # one step where the allocator gave back
    slope, over_noise = _sustained_growth(points)
    assert slope == pytest.approx(389 * 1024)
    assert over_noise is not None and over_noise > 100  # a clean line: far above its scatter


def test_scatter_that_looks_like_a_slope_stays_within_the_noise() -> None:
    # Measured: cnn_slow_dataloader.py's timed steps (RSS in MiB, torch 2.13 CPU), a plain
    # script without a leak whose RSS swings by megabytes; the later half happens to end high.
    rss = [352.6, 341.7, 358.6, 348.8, 344.6, 357.4, 356.4, 360.9, 365.7, 345.8]
    rss += [349.8, 341.8, 356.8, 354.8, 354.0, 353.4, 341.8, 353.7, 358.7, 363.1]
    points = [(float(i), v * MIB) for i, v in enumerate(rss)]
    slope, over_noise = _sustained_growth(points)
    # Not growth: either it does not persist (0) or it stays within the scatter.
    assert slope == 0.0 or (over_noise is not None and over_noise < 3.0)


def test_too_few_points() -> None:
    assert _sustained_growth([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) == (None, None)


def _mib(values: list[float]) -> list[tuple[float, float]]:
    return [(float(i), v * MIB) for i, v in enumerate(values)]


def test_one_jump_is_not_growth() -> None:
    # Measured shape on a real script: RSS steps up once (a buffer allocated mid-window)
    # and stays; the old fit over the last 5 of 10 steps called it 35.9 MiB/step.
    slope, over_noise = _sustained_growth(_mib([401.0] * 6 + [437.0] * 4))
    assert slope == 0.0 and over_noise == 0.0
    slope, _ = _sustained_growth(_mib([401.0] * 14 + [437.0] * 6))
    assert slope == 0.0


def test_a_swing_with_no_trend_is_not_growth() -> None:
    swing = [400.0, 420.0, 440.0, 460.0, 440.0, 420.0, 400.0, 420.0, 440.0, 460.0]
    assert _sustained_growth(_mib(swing))[0] == 0.0
    wave = [400.0, 412.0, 431.0, 425.0, 403.0, 398.0, 415.0, 433.0, 421.0, 405.0] * 2
    assert _sustained_growth(_mib(wave))[0] == 0.0


def test_a_real_leak_with_noise_is_growth_above_the_noise() -> None:
    # 1 MiB per step under +-0.3 MiB of scatter, over 10 and over 20 timed steps.
    noise = [0.2, -0.3, 0.1, 0.3, -0.2, 0.0, -0.1, 0.25, -0.25, 0.15] * 2
    for n in (10, 20):
        slope, over_noise = _sustained_growth(_mib([400.0 + i + noise[i] for i in range(n)]))
        assert slope == pytest.approx(MIB, rel=0.15)
        assert over_noise is not None and over_noise >= 3.0


def _settling(first_mib: float, tau: float, n: int = 20) -> list[float]:
    """RSS of a run still filling its caches: first_mib in the first step, decaying."""
    values = [380.0]
    for i in range(1, n):
        values.append(values[-1] + first_mib * math.exp(-i / tau))
    return values


@pytest.mark.parametrize(("first_mib", "tau"), [(3.0, 4.0), (2.0, 6.0), (1.6, 8.0)])
def test_warmup_that_settles_inside_the_window_is_not_growth(first_mib: float, tau: float) -> None:
    # The slope over the whole window called these 0.3-0.5 MiB/step (over 1% of the RSS:
    # a warning); the last third adds a few KiB per step and does not persist.
    slope, _ = _sustained_growth(_mib(_settling(first_mib, tau)))
    assert slope is not None and slope < 64 * 1024


def test_flat_rss_with_one_mib_jitter_is_not_growth() -> None:
    # RSS within 383..388 MiB moving by whole MiB (pymalloc arenas): it happens to end
    # 4 MiB higher, every third of the window rises, and the old fit called it 0.23 MiB/step
    # at 5x its scatter.
    rss = [384.0, 383.0, 384.0, 384.0, 385.0, 386.0, 385.0, 386.0, 385.0, 386.0]
    rss += [387.0, 388.0, 388.0, 388.0, 387.0, 386.0, 387.0, 388.0, 388.0, 387.0]
    assert _sustained_growth(_mib(rss)) == (0.0, 0.0)


def test_a_leak_in_whole_mib_pieces_is_still_growth() -> None:
    # Half a MiB per step, RSS moving in 1 MiB pieces every other step.
    slope, over_noise = _sustained_growth(_mib([400.0 + i // 2 for i in range(20)]))
    assert slope == pytest.approx(MIB / 2, rel=0.2)
    assert over_noise is not None and over_noise >= 3.0


def test_a_steady_cuda_leak_keeps_its_rate_and_clean_line() -> None:
    slope, over_noise = _sustained_growth([(float(i), 1e9 + i * 4096.0) for i in range(12)])
    assert slope == 4096.0 and over_noise == 1e9


# Issue 32: a leak served in heap-sized chunks (RSS flat for a few readings, then a jump)
# leaves a part of the window flat; the parts' levels still climb at one rate.
_CHUNKED_LEAK_MEASURED = [383.9, 391.9, 395.9, 401.9, 415.9, 415.9, 415.9, 415.9, 417.9, 417.9]
_CHUNKED_LEAK_MEASURED += [433.9, 433.9, 433.9, 435.9, 441.9, 455.9, 455.9, 455.9, 457.9, 457.9]


def _rule_fires(points: list[tuple[float, float]]) -> bool:
    """The memory-growth-host rule over these readings, as the pipeline would run it."""
    from perfdoctor.rules.memory import _GROWTH_THRESHOLDS, check_growth_host
    from tests.unit.rules.factsets import make_facts

    slope, over_noise = _sustained_growth(points)
    facts = make_facts(
        "cpu",
        steps_timed=len(points),
        rss_growth_bytes_per_step=slope,
        rss_growth_over_noise=over_noise,
        rss_bytes_max=max(y for _, y in points),
    )
    return check_growth_host(facts, _GROWTH_THRESHOLDS) is not None


def test_a_leak_served_in_chunks_with_a_flat_stretch_is_growth() -> None:
    # Measured (torch 2.13 CPU): a script appending each step's output, graph attached, to a
    # list; 4 MiB/step in 2..16 MiB pieces with four equal readings in the middle. Before:
    # (0.0, 0.0), no finding.
    points = _mib(_CHUNKED_LEAK_MEASURED)
    slope, over_noise = _sustained_growth(points)
    assert slope is not None and 3.0 * MIB < slope < 4.5 * MIB
    assert over_noise is not None and over_noise >= 3.0
    assert _rule_fires(points)


def test_the_issue_shape_338_to_443_mb_with_three_equal_readings_is_growth() -> None:
    # 19 readings, 338 -> 443 MB (~5.8 MB/step), one stretch of three equal readings.
    mb = [338, 344, 350, 357, 362, 368, 375, 381, 386, 386, 386, 404, 409, 415, 421, 426]
    mb += [432, 437, 443]
    points = [(float(i), v * 1e6) for i, v in enumerate(mb)]
    slope, _ = _sustained_growth(points)
    assert slope is not None and 4.5e6 < slope < 6.5e6
    assert _rule_fires(points)


def test_two_allocations_made_once_are_not_growth() -> None:
    # Two 20 MiB buffers at a third and two thirds of the window: the levels climb steadily
    # but in two pieces.
    rss = [400.0] * 7 + [420.0] * 7 + [440.0] * 6
    assert _sustained_growth(_mib(rss)) == (0.0, 0.0)
    assert not _rule_fires(_mib(rss))


def test_bounded_allocator_jitter_is_never_growth() -> None:
    # RSS moving by whole MiB pieces (up, down or not at all) within +-4 MiB of where it
    # started: some of these walks climb for a whole window; none may read as a leak.
    rng = np.random.default_rng(32)
    for n in (10, 20):
        for _ in range(150):
            rss = [400.0]
            for _ in range(n - 1):
                nxt = rss[-1] + float(rng.choice([-1.0, 0.0, 1.0]))
                rss.append(nxt if abs(nxt - 400.0) <= 4.0 else rss[-1])
            assert not _rule_fires(_mib(rss)), rss


def test_a_step_up_at_warm_up_then_flat_noise_is_not_growth() -> None:
    rss = [380.0, 395.0, 410.0] + [410.0 + (0.6 if i % 3 == 0 else -0.4) for i in range(17)]
    assert not _rule_fires(_mib(rss))
