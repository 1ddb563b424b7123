"""Memory growth that lasts (a leak) is told apart from allocator warm-up that settles."""

from __future__ import annotations

import pytest

from perfdoctor.analyze.facts import _sustained_growth

MIB = 2**20


def test_warmup_then_plateau_is_not_growth() -> None:
    # Measured shape of a healthy CPU run: RSS climbs for a few steps, then jitters flat.
    # (gpt_char_lm.py timed steps, MiB, torch 2.13 CPU.)
    rss = [386.0, 388.5, 411.4, 398.5, 398.5, 405.2, 410.2, 413.2, 417.2, 417.2]
    rss += [417.2, 404.4, 418.2, 418.2, 418.2, 418.2, 418.2, 418.2, 418.1, 408.3]
    points = [(float(i), v * MIB) for i, v in enumerate(rss)]
    assert abs(_sustained_growth(points)) < 64 * 1024


def test_linear_leak_is_measured_exactly_despite_a_jump() -> None:
    points = [(float(i), 400 * MIB + i * 389 * 1024) for i in range(20)]
    points[15] = (15.0, points[15][1] - 30 * MIB)  # one step where the allocator gave back
    assert _sustained_growth(points) == pytest.approx(389 * 1024)


def test_too_few_points() -> None:
    assert _sustained_growth([(0.0, 1.0), (1.0, 2.0)]) is None
