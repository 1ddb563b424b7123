"""Python frames from traces and snapshots: parse them, and tell the user's code from libraries.

Trace frames (`python_function` events) are named `path(line): function`. The profiler writes
paths relative to the `sys.path` entry they were found under, so torch shows up as
`torch/nn/modules/module.py`, the standard library as `typing.py`, and the user's own modules
as `train.py` or `models/net.py` (absolute only when their directory was not on `sys.path`).
The line is the function's first line for frames entered inside the profiler window, and the
line being executed when the window opened for frames already running then.

Memory-snapshot frames are dicts with an absolute `filename`, a `line` and a `name`.

A frame is library code when it is a builtin (`<built-in ...>`, `<frozen ...>`), lies under
site-packages / dist-packages / a Python installation, or when its top-level name is a
standard-library module, an installed distribution, or one of the frameworks below. A
relative path that exists under one of the user's roots (script directory, cwd) is the
user's, whatever its name -- except perfdoctor's own frames, which never are.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")

# Frameworks whose frames are never the user's, also when they are not installed where the
# analysis runs (a run directory analysed on another machine).
KNOWN_LIBRARIES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "functorch",
        "triton",
        "numpy",
        "PIL",
        "cv2",
        "scipy",
        "pandas",
        "sklearn",
        "transformers",
        "datasets",
        "accelerate",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "deepspeed",
        "timm",
        "einops",
        "apex",
        "albumentations",
        "tqdm",
        "rich",
        "typer",
        "click",
        "perfdoctor",
        "runpy",
        "_pytest",
        "pytest",
    }
)
_INSTALL_MARKERS = ("site-packages/", "dist-packages/", "/lib/python3", "/lib64/python3")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


def parse_frame_name(name: str) -> Frame | None:
    """`train.py(42): forward` -> Frame; builtins and module labels -> None."""
    if name.startswith("<"):
        return None
    m = _FRAME.match(name)
    if m is None:
        return None
    return Frame(m.group("file"), int(m.group("line")), m.group("func"))


@functools.lru_cache(maxsize=1)
def _installed_top_levels() -> frozenset[str]:
    """Top-level module names of the installed distributions (metadata only, no import)."""
    try:
        from importlib.metadata import packages_distributions

        return frozenset(packages_distributions())
    except Exception:  # broken distribution metadata must not break the analysis
        return frozenset()


def _top_level(path: str) -> str:
    first = path.replace("\\", "/").split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


class UserCode:
    """Classifies file names as the user's code or library code; results are cached."""

    def __init__(self, roots: Sequence[str | Path] = ()) -> None:
        self.roots = tuple(Path(r) for r in roots if r)
        self._cache: dict[str, bool] = {}

    def is_user_file(self, path: str) -> bool:
        cached = self._cache.get(path)
        if cached is None:
            cached = self._cache[path] = self._classify(path)
        return cached

    def display(self, path: str) -> str:
        """An absolute path under one of the roots, shown relative to it (cwd first)."""
        if not path.startswith("/"):
            return path
        for root in reversed(self.roots):
            try:
                return str(Path(path).relative_to(root))
            except ValueError:
                continue
        return path

    def is_user_frame_name(self, name: str) -> bool:
        frame = parse_frame_name(name)
        return frame is not None and self.is_user_file(frame.file)

    def _classify(self, path: str) -> bool:
        if not path or path.startswith("<") or path.startswith("??"):
            return False
        norm = path.replace("\\", "/")
        if any(marker in norm for marker in _INSTALL_MARKERS):
            return False
        if not norm.endswith(".py"):
            return False  # C++ frames of memory snapshots (.cpp, .h, shared objects)
        if norm.startswith("/"):
            prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
            return not any(p and norm.startswith(p.rstrip("/") + "/lib") for p in prefixes)
        top = _top_level(norm)
        if top == "perfdoctor":
            return False  # our own hooks, also when the user runs from a perfdoctor checkout
        for root in self.roots:
            if (root / norm).is_file():
                return True
        if top in KNOWN_LIBRARIES or top in sys.stdlib_module_names:
            return False
        return top not in _installed_top_levels()
