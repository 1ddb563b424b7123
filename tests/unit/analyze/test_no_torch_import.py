"""The offline core never imports torch or pynvml (design: a pure core in an impure shell),
so `perfdoctor report` works on a machine without them and analysis stays fast to start."""

from __future__ import annotations

import subprocess
import sys

from load_limits import scaled

PURE_PACKAGES = (
    "perfdoctor.analyze",
    "perfdoctor.rules",
    "perfdoctor.optimize",
    "perfdoctor.render",
)

CHECK = """
import importlib, pkgutil, sys
names = []
for package in {packages!r}:
    pkg = importlib.import_module(package)
    names.append(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        importlib.import_module(info.name)
        names.append(info.name)
heavy = sorted(m for m in ("torch", "pynvml") if m in sys.modules)
assert not heavy, f"importing the offline core pulled in {{heavy}}"
print(len(names))
"""


def test_offline_core_imports_neither_torch_nor_pynvml() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(packages=PURE_PACKAGES)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 10  # the analysis modules alone are more than that


def test_facts_entry_point_alone_does_not_import_torch() -> None:
    code = "import perfdoctor.analyze.facts, sys; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=scaled(60)).returncode == 0
