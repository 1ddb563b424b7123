"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from appliers_support import Harness


@pytest.fixture
def harness_factory() -> Iterator[Callable[..., Harness]]:
    """Installs appliers in this process (`harness_factory("amp-bf16", ...)`) and undoes
    every patch they made when the test ends, so applier tests stay independent."""
    from appliers_support import Harness  # here: only applier tests pay for importing torch

    made: list[Harness] = []

    def make(*ids: str) -> Harness:
        harness = Harness(ids).install()
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
