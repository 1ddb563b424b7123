"""Limits that stretch with the machine's load (issue 25 item 5).

A limit in a test bounds a hang; it must never fail a test because the machine is slow. On a
2-core machine at load 10 a child run takes about 5x its quiet time, so every wait for a
child is a quiet-machine limit times `slowdown()`: the 1-minute load average per core
(never below 1), times PERFDOCTOR_TEST_SLOWDOWN when set (a slow CPU, a debugger, a VM),
measured when the wait starts. Tests assert what happened, never how fast.

Importable from any test (`from load_limits import scaled`): tests/ is on sys.path as the
directory of the top conftest.py.
"""

from __future__ import annotations

import os

SLOWDOWN_ENV = "PERFDOCTOR_TEST_SLOWDOWN"


def slowdown() -> float:
    """How much slower than a quiet machine this one is now (>= 1)."""
    try:
        factor = float(os.environ.get(SLOWDOWN_ENV, "1"))
    except ValueError:
        factor = 1.0
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average (Windows)
        per_core = 1.0
    return max(1.0, factor) * max(1.0, per_core)


def scaled(limit_s: float) -> float:
    """`limit_s` (enough on a quiet machine, with margin) stretched by the current load."""
    return limit_s * slowdown()
