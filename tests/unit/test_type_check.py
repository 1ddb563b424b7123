"""The type checker over the package: no error in the core, no new error in collect/.

mypy's configuration is in pyproject.toml. collect/ is checked against torch's own stubs,
whose errors depend on the torch release, so its known errors are kept in a baseline file
(recorded with the torch named on its first line) that may only shrink: a new error fails,
and so does a baseline line no longer reported (delete it, the baseline shrinks).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from load_limits import scaled

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "tests" / "unit" / "mypy_collect_baseline.txt"
COLLECT = "perfdoctor/collect/"
_LINE = re.compile(r"^(?P<path>[^:]+):\d+: error: (?P<message>.*)$")


def _errors() -> list[str]:
    """mypy's errors as 'path: message [code]', without line numbers (they move)."""
    pytest.importorskip("mypy", reason="mypy is a dev dependency: bash tools/install.sh --dev")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    if done.returncode not in (0, 1):
        pytest.fail(f"mypy did not run:\n{done.stdout}\n{done.stderr}")
    found = []
    for line in done.stdout.splitlines():
        match = _LINE.match(line)
        if match:
            found.append(f"{match['path']}: {match['message']}")
    return found


def _baseline() -> tuple[str, list[str]]:
    first, *rest = BASELINE.read_text().splitlines()
    return first.removeprefix("# torch ").strip(), [line for line in rest if line.strip()]


@pytest.fixture(scope="module")
def errors() -> list[str]:
    return _errors()


def test_the_core_packages_type_check_without_errors(errors: list[str]) -> None:
    core = [e for e in errors if not e.startswith(COLLECT)]
    assert not core, "mypy errors outside perfdoctor/collect/:\n" + "\n".join(core)


def test_collect_has_no_error_beyond_its_baseline(errors: list[str]) -> None:
    import torch

    recorded_with, known = _baseline()
    if torch.__version__ != recorded_with:
        pytest.skip(f"baseline recorded with torch {recorded_with}, not {torch.__version__}")
    collect = [e for e in errors if e.startswith(COLLECT)]
    new = sorted(set(collect) - set(known))
    gone = sorted(set(known) - set(collect))
    assert not new, "new mypy errors in collect/ (fix them; the baseline only shrinks):\n" + (
        "\n".join(new)
    )
    assert not gone, f"fixed errors still in {BASELINE.name}: delete these lines:\n" + "\n".join(
        gone
    )
