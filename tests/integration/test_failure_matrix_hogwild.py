"""How a run with Hogwild trainers ends (multiprocessing.Process, each updating one shared
model): a crashing trainer, a hang past `--timeout`, Ctrl-C and SIGTERM. The Hogwild cells of
test_failure_matrix.py's matrix (its docstring says what each cell checks), in a module of
their own so that the suite's workers share the matrix.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_failure_matrix import HOGWILD_CASES, check_the_cell

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("setup", "failure"), HOGWILD_CASES)
def test_a_failing_or_stopped_run_ends_cleanly(tmp_path: Path, setup: str, failure: str) -> None:
    check_the_cell(tmp_path, setup, failure)
