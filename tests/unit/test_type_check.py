"""The type checker over the package: no error in the core, no new error in collect/.

mypy's configuration is in pyproject.toml. collect/ is checked against torch's own stubs,
whose errors depend on the torch release, so its known errors are kept in a baseline file
(recorded with the torch named on its first line) that may only shrink: a new error fails,
and so does a baseline line no longer reported (delete it, the baseline shrinks).
"""

from __future__ import annotations

import os
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


def _cache_dir() -> Path:
    """Where mypy keeps its incremental cache for this test: MYPY_CACHE_DIR when set, else
    one per user outside the checkout. Checking collect/ reads torch's own annotations: with
    no cache that is about 60 s of CPU (57 s user at load 24 on 2 cores), against 1.7 s
    with one, and a fresh clone's `.mypy_cache` is always empty. mypy validates each cached
    module against its source (size, then hash) and writes entries atomically, so a cache
    shared by several checkouts gives the same errors (checked: 30 errors, identical, from
    another clone's cache)."""
    explicit = os.environ.get("MYPY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "perfdoctor-tests" / "mypy"


def _errors() -> list[str]:
    """mypy's errors as 'path: message [code]', without line numbers (they move)."""
    pytest.importorskip("mypy", reason="mypy is a dev dependency: bash tools/install.sh --dev")
    command = [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty"]
    done = subprocess.run(
        [*command, "--cache-dir", str(_cache_dir())],
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
