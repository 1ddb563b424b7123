"""optimize/switchable.py agrees with the appliers it names."""

from __future__ import annotations

from perfdoctor.collect.appliers import APPLIERS
from perfdoctor.collect.appliers.base import Applier
from perfdoctor.optimize.switchable import SWITCHABLE


def test_switchable_ids_are_the_appliers_that_switch():
    assert {i for i, cls in APPLIERS.items() if cls.switchable} == SWITCHABLE


def test_every_switchable_applier_implements_switch():
    assert all(APPLIERS[i].switch is not Applier.switch for i in SWITCHABLE)
