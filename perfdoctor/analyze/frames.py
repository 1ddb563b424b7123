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

The same UserCode classifies the frames of the running interpreter in the child
(perfdoctor/collect: where a DataLoader was built, which line synced, where the script
crashed), so that the live side and the analysis agree on what the user's code is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import site
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import perfdoctor

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
# A script run through its shebang has no suffix; C++ frames of snapshots (.cpp, .h, shared
# objects) are never the user's Python.
_PYTHON_SUFFIXES = (".py", ".pyw")

Location = dict[str, Any]  # {"file": str, "line": int, "function": str}


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


@functools.lru_cache(maxsize=1)
def interpreter_library_dirs() -> tuple[str, ...]:
    """This interpreter's library directories: the standard library, site-packages (also the
    user's), the installation's lib directories, and perfdoctor's own package."""
    dirs: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(path)
    with contextlib.suppress(AttributeError):  # some virtualenv site modules lack it
        dirs.update(site.getsitepackages())
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        dirs.add(user_site)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if prefix:
            dirs.update(os.path.join(prefix, lib) for lib in ("lib", "lib64"))
    dirs.add(os.path.dirname(os.path.abspath(perfdoctor.__file__)))
    return tuple(sorted(os.path.normcase(os.path.abspath(d)) for d in dirs))


def _dir_prefix(directory: str | Path) -> str:
    return os.path.normcase(os.path.abspath(directory)).rstrip(os.sep) + os.sep


class UserCode:
    """Classifies file names as the user's code or library code; results are cached.

    An absolute path belongs to the longest directory that contains it, of the user's roots
    and the library directories (this interpreter's, and any directory a path names as an
    installation: `.../site-packages/`, `.../lib/python3.x`). So the target's own root wins
    over a library directory that contains it (a script inside a virtualenv's
    site-packages, a `-m` package installed in editable mode) and loses to one inside it (a
    `.venv` under the user's project). A path under neither is the user's own helper module.
    A relative path (as the profiler writes them) is the user's when it exists under a root,
    and otherwise judged by its top-level name (see the module's doc).

    `cwd` is where `location` shows paths from; `library_dirs` defaults to this
    interpreter's (interpreter_library_dirs()).
    """

    def __init__(
        self,
        roots: Sequence[str | Path] = (),
        *,
        cwd: str | Path | None = None,
        library_dirs: Sequence[str] | None = None,
    ) -> None:
        self.roots: tuple[Path, ...] = ()
        self._cwd = os.path.normcase(os.path.abspath(cwd)) if cwd is not None else None
        dirs = interpreter_library_dirs() if library_dirs is None else library_dirs
        self._prefixes: list[tuple[str, bool]] = []  # (directory + os.sep, is_user), longest first
        self._cache: dict[str, bool] = {}
        for directory in dirs:
            self._add_prefix(_dir_prefix(directory), is_user=False)
        for root in roots:
            if root:
                self.add_root(root)

    @classmethod
    def for_target(cls, target_root: str, cwd: str) -> UserCode:
        """The child's: the target's directory is the user's, locations relative to cwd."""
        return cls([target_root], cwd=cwd)

    def add_root(self, directory: str | Path) -> None:
        """Another directory of the user's own code (a `-m` package found after import)."""
        prefix = _dir_prefix(directory)
        if (prefix, True) in self._prefixes:
            return
        self.roots = (*self.roots, Path(directory))
        self._add_prefix(prefix, is_user=True)

    def _add_prefix(self, prefix: str, *, is_user: bool) -> None:
        self._prefixes.append((prefix, is_user))
        self._prefixes.sort(key=lambda item: len(item[0]), reverse=True)
        self._cache.clear()

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
            return False  # <frozen ...>, <string>, <built-in ...>, unknown C++ frames
        norm = path.replace("\\", "/")
        suffix = os.path.splitext(norm)[1].lower()
        if os.path.isabs(norm):
            owner = self._owner(os.path.normcase(os.path.abspath(norm)))
            if owner is not None:
                return owner and suffix in ("", *_PYTHON_SUFFIXES)
            return suffix in _PYTHON_SUFFIXES
        if suffix not in _PYTHON_SUFFIXES or any(m in norm for m in _INSTALL_MARKERS):
            return False
        top = _top_level(norm)
        if top == "perfdoctor":
            return False  # our own hooks, also when the user runs from a perfdoctor checkout
        for root in self.roots:
            if (root / norm).is_file():
                return True
        if top in KNOWN_LIBRARIES or top in sys.stdlib_module_names:
            return False
        return top not in _installed_top_levels()

    def _owner(self, path: str) -> bool | None:
        """True: a user root holds `path`; False: a library directory; None: neither. The
        longest match wins; a directory the path names as an installation is a library."""
        best, verdict = 0, None
        for prefix, is_user in self._prefixes:  # longest first: the first match wins
            if path.startswith(prefix):
                best, verdict = len(prefix), is_user
                break
        slashed = path.replace(os.sep, "/")
        for marker in _INSTALL_MARKERS:
            at = slashed.find(marker)
            if at >= 0 and at + len(marker) > best:
                best, verdict = at + len(marker), False
        return verdict

    def location(self, filename: str, line: int | None, function: str) -> Location:
        """{"file", "line", "function"}, the file relative to cwd when it lies under it (line
        0 where Python knows none: a frame between lines, or a traceback entry of one)."""
        path = os.path.abspath(filename)
        norm = os.path.normcase(path)
        if self._cwd is not None and norm.startswith(self._cwd.rstrip(os.sep) + os.sep):
            path = os.path.relpath(path, self._cwd)
        return {"file": path, "line": int(line or 0), "function": function}

    def caller(self, frame: FrameType | None) -> Location | None:
        """The innermost user frame at or above `frame` (None: no user frame on the stack)."""
        while frame is not None:
            code = frame.f_code
            if self.is_user_file(code.co_filename):
                return self.location(code.co_filename, frame.f_lineno, code.co_name)
            frame = frame.f_back
        return None

    def caller_key(self, frame: FrameType | None) -> tuple[str, int, str] | None:
        """Like `caller`, but a cheap tuple for hot paths (format it later with `location`)."""
        while frame is not None:
            code = frame.f_code
            if self.is_user_file(code.co_filename):
                return (code.co_filename, frame.f_lineno, code.co_name)
            frame = frame.f_back
        return None

    def innermost_in_traceback(self, tb: TracebackType | None) -> Location | None:
        """The deepest traceback entry that is the user's code: where their code failed."""
        found: Location | None = None
        while tb is not None:
            code = tb.tb_frame.f_code
            if self.is_user_file(code.co_filename):
                found = self.location(code.co_filename, tb.tb_lineno, code.co_name)
            tb = tb.tb_next
        return found
