"""tests/load_limits.py: limits stretch with the load and PERFDOCTOR_TEST_SLOWDOWN, never shrink."""

from __future__ import annotations

import os

import pytest
from load_limits import SLOWDOWN_ENV, scaled, slowdown


def test_a_limit_never_shrinks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, "0.1")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert slowdown() == 1.0 and scaled(60) == 60


def test_the_load_per_core_stretches_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (10.0, 8.0, 6.0))
    assert scaled(60) == pytest.approx(300)  # load 10 on 2 cores: 5x


def test_the_slowdown_factor_multiplies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWDOWN_ENV, "3")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0, 4.0, 4.0))
    assert scaled(10) == pytest.approx(60)
    monkeypatch.setenv(SLOWDOWN_ENV, "not a number")
    assert scaled(10) == pytest.approx(20)


def test_the_fixture_is_the_same_function(scaled_limit) -> None:
    assert scaled_limit is scaled
