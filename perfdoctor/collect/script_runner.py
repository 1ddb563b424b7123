"""Run the user's target exactly as `python script.py args` or `python -m module args` would.

What `python sub/train.py a b` gives a script (mechanics §1.1): `sys.argv` as typed
(`['sub/train.py', 'a', 'b']`), an absolute `__file__`, `__name__ == "__main__"`,
`sys.path[0]` = the script's directory, the cwd unchanged, and the script's module as
`sys.modules["__main__"]` so classes defined in it pickle (DataLoader workers, spawn too).
`runpy.run_path` would overwrite `argv[0]` with the path it is given, so plain files are
executed here with the same steps runpy takes; directories and zip files go to runpy.
`-m pkg.mod` goes to `runpy.run_module(alter_sys=True)` with `sys.path[0]` = the cwd.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import types
from dataclasses import dataclass

from perfdoctor.errors import EXIT_TARGET_INVALID, EXIT_TARGET_NOT_FOUND
from perfdoctor.model import Target


class LaunchError(Exception):
    """The target could not be started at all (not a failure of the script itself)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ResolvedTarget:
    target: Target
    file: str  # absolute path of the file whose frames are the script's own
    root: str  # directory holding the user's code (script dir, or the top package's parent)


def resolve(target: Target, cwd: str) -> ResolvedTarget:
    """Locate the target without running it. Module targets import their parent packages,
    exactly as `python -m` does before running the module."""
    if target.kind == "module":
        return _resolve_module(target, cwd)
    path = os.path.abspath(os.path.join(cwd, target.name))
    if not os.path.exists(path):
        raise LaunchError(f"script not found: {target.name}", EXIT_TARGET_NOT_FOUND)
    root = path if os.path.isdir(path) else os.path.dirname(path)
    return ResolvedTarget(target, path, root)


def _resolve_module(target: Target, cwd: str) -> ResolvedTarget:
    name = target.name
    _put_on_path(cwd)
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise LaunchError(f"module not found: {name}", EXIT_TARGET_NOT_FOUND) from None
        raise  # an import inside the user's package failed: their error, their traceback
    if spec is None:
        raise LaunchError(f"module not found: {name}", EXIT_TARGET_NOT_FOUND)
    if spec.submodule_search_locations is not None:
        main_spec = importlib.util.find_spec(f"{name}.__main__")
        if main_spec is None:
            raise LaunchError(
                f"module not found: {name}.__main__ ('{name}' is a package and cannot be "
                "directly executed)",
                EXIT_TARGET_NOT_FOUND,
            )
        spec = main_spec
    origin = os.path.abspath(spec.origin) if spec.origin else os.path.abspath(cwd)
    top = name.split(".")[0]
    top_spec = importlib.util.find_spec(top)
    if top_spec is not None and top_spec.submodule_search_locations:
        package_dir = next(iter(top_spec.submodule_search_locations))
        root = os.path.dirname(os.path.abspath(package_dir))
    else:
        root = os.path.dirname(origin)
    return ResolvedTarget(target, origin, root)


def _put_on_path(directory: str) -> None:
    """Replace the bootstrap's sys.path[0] as Python would, unless -P/PYTHONSAFEPATH."""
    if getattr(sys.flags, "safe_path", False):
        return
    if sys.path:
        sys.path[0] = directory
    else:
        sys.path.insert(0, directory)


def run(resolved: ResolvedTarget) -> None:
    """Execute the target; its SystemExit and exceptions propagate to the caller."""
    target = resolved.target
    if target.kind == "module":
        sys.argv = [target.name, *target.argv]  # run_module replaces argv[0] with the file
        runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        return
    sys.argv = [target.name, *target.argv]
    _put_on_path(resolved.root)
    if os.path.isdir(resolved.file) or _is_zip(resolved.file):
        # A directory or zip file with a __main__.py: runpy knows how to run those.
        runpy.run_path(resolved.file, run_name="__main__")
        return
    _run_source_file(resolved.file)


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _run_source_file(path: str) -> None:
    with io.open_code(path) as fh:
        source = fh.read()
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise LaunchError(f"syntax error: {exc}", EXIT_TARGET_INVALID) from exc
    module = types.ModuleType("__main__")
    module.__dict__.update(
        {
            "__file__": path,
            "__cached__": None,
            "__loader__": importlib.machinery.SourceFileLoader("__main__", path),
            "__package__": None,
            "__spec__": None,
            "__builtins__": builtins,
        }
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
