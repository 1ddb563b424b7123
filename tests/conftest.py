"""Settings for the test process and every process the tests start."""

from __future__ import annotations

import os
import sys

# Python caches bytecode by default; some environments (CI images, sandboxes) turn that off
# with PYTHONDONTWRITEBYTECODE. Then every pytest run rewrites the assertions of every test
# module again and every child session compiles perfdoctor's modules again: about 3 s of
# collection and 0.15 s of CPU per process, over the few hundred processes a suite run
# starts. The tests run Python as users do, with the cache (`__pycache__` is git-ignored).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Limits on waits stretch with the machine's load (tests/load_limits.py): a test bounds a
# hang, never the machine's speed. Modules import `scaled` directly; this fixture is the same.
import pytest  # noqa: E402
from load_limits import scaled  # noqa: E402


@pytest.fixture
def scaled_limit():
    """scaled(limit_s): a quiet-machine limit stretched by the current load."""
    return scaled
