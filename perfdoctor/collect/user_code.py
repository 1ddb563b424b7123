"""Which source files are the user's own code, and where in them something happened.

Locations point at the user's file:line (the DataLoader constructor call, the evaluation
forward, the line that crashed), never at torch, the standard library or perfdoctor.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
from types import FrameType, TracebackType
from typing import Any

import perfdoctor

Location = dict[str, Any]  # {"file": str, "line": int, "function": str}


def _library_dirs() -> list[str]:
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
    dirs.add(os.path.dirname(os.path.abspath(perfdoctor.__file__)))
    return [os.path.normcase(os.path.abspath(d)) for d in dirs]


class UserCode:
    """Classifies files by the longest matching directory: the target's own root wins over
    a library directory that contains it (a script inside a virtualenv's site-packages, a
    `-m` package installed in editable mode) and loses to one inside it (a `.venv` under the
    user's project)."""

    def __init__(self, target_root: str, cwd: str, library_dirs: list[str]) -> None:
        self._cwd = os.path.normcase(os.path.abspath(cwd))
        self._prefixes: list[tuple[str, bool]] = [
            (d.rstrip(os.sep) + os.sep, False) for d in library_dirs
        ]
        self._cache: dict[str, bool] = {}
        self.add_root(target_root)

    @classmethod
    def for_target(cls, target_root: str, cwd: str) -> UserCode:
        return cls(target_root, cwd, _library_dirs())

    def add_root(self, directory: str) -> None:
        """Another directory of the user's own code (a `-m` package found after import)."""
        prefix = os.path.normcase(os.path.abspath(directory)).rstrip(os.sep) + os.sep
        if (prefix, True) not in self._prefixes:
            self._prefixes.append((prefix, True))
            self._prefixes.sort(key=lambda item: len(item[0]), reverse=True)
            self._cache.clear()

    def is_user_file(self, filename: str) -> bool:
        known = self._cache.get(filename)
        if known is not None:
            return known
        result = self._classify(filename)
        self._cache[filename] = result
        return result

    def _classify(self, filename: str) -> bool:
        if not filename or filename.startswith("<"):
            return False  # <frozen ...>, <string>, <stdin>
        path = os.path.normcase(os.path.abspath(filename))
        for prefix, is_user in self._prefixes:
            if path.startswith(prefix):
                return is_user
        return True  # outside every library directory: the user's own helper module

    def location(self, filename: str, line: int, function: str) -> Location:
        path = os.path.abspath(filename)
        norm = os.path.normcase(path)
        if norm.startswith(self._cwd.rstrip(os.sep) + os.sep):
            path = os.path.relpath(path, self._cwd)
        return {"file": path, "line": int(line), "function": function}

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


def current_frame(depth: int = 1) -> FrameType | None:
    """The caller's frame (depth 1 = whoever called the function calling this)."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
