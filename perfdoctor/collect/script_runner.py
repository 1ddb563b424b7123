"""Run the user's target exactly as `python script.py args` or `python -m module args` would.

What `python sub/train.py a b` gives a script (mechanics §1.1): `sys.argv` as typed
(`['sub/train.py', 'a', 'b']`), an absolute `__file__`, `__name__ == "__main__"`,
`sys.path[0]` = the script's directory, the cwd unchanged, and the script's module as
`sys.modules["__main__"]` so classes defined in it pickle (DataLoader workers, spawn too).
`runpy.run_path` would overwrite `argv[0]` with the path it is given, so plain files are
compiled here with the same steps runpy takes; directories and zip files go to runpy.
`-m pkg.mod` gets the module namespace `runpy.run_module(alter_sys=True)` would give it
(`argv[0]` = the module's file, `__spec__`, `__package__`), with `sys.path[0]` = the cwd.

`prepare` returns the code and its `__main__` module instead of running them: the caller
execs the code from its own frame. Under `torch.autograd.set_detect_anomaly(True)` every op
records the whole Python stack, so each frame between the interpreter and the script costs
time on every op; runpy's helpers would add two or three.
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
from dataclasses import dataclass, field
from typing import Any

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
    module_spec: Any = field(default=None, compare=False)  # ModuleSpec of a -m target


class MainModule:
    """The target's code object and the `__main__` module it runs in.

    `with main as namespace: exec(main.code, namespace)`: while the block runs the module is
    `sys.modules["__main__"]` (classes defined in the script pickle, spawn workers find it);
    afterwards the previous `__main__` is back.
    """

    def __init__(self, code: types.CodeType, module: types.ModuleType) -> None:
        self.code = code
        self.module = module
        self._saved: types.ModuleType | None = None

    def __enter__(self) -> dict[str, Any]:
        self._saved = sys.modules.get("__main__")
        sys.modules["__main__"] = self.module
        return self.module.__dict__

    def __exit__(self, *exc_info: object) -> None:
        if self._saved is not None:
            sys.modules["__main__"] = self._saved


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
    return ResolvedTarget(target, origin, root, module_spec=spec)


def _put_on_path(directory: str) -> None:
    """Replace the bootstrap's sys.path[0] as Python would, unless -P/PYTHONSAFEPATH."""
    if getattr(sys.flags, "safe_path", False):
        return
    if sys.path:
        sys.path[0] = directory
    else:
        sys.path.insert(0, directory)


def prepare(resolved: ResolvedTarget) -> MainModule | None:
    """Set `sys.argv` and `sys.path[0]` as `python` would and return the target's code with
    its `__main__` module; None for a directory or zip file (`run_path` runs those)."""
    target = resolved.target
    if target.kind == "module":
        sys.argv = [resolved.file, *target.argv]  # as runpy.run_module(alter_sys=True)
        return _module_main(resolved)
    sys.argv = [target.name, *target.argv]
    _put_on_path(resolved.root)
    if os.path.isdir(resolved.file) or _is_zip(resolved.file):
        return None
    return _source_file_main(resolved.file)


def run_path(resolved: ResolvedTarget) -> None:
    """A directory or zip file with a __main__.py: runpy knows how to run those."""
    runpy.run_path(resolved.file, run_name="__main__")


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _source_file_main(path: str) -> MainModule:
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
    return MainModule(code, module)


def _module_main(resolved: ResolvedTarget) -> MainModule:
    """The namespace runpy's `_run_code` gives a module run as `__main__`.

    A SyntaxError in the module propagates, as from `python -m` (and runpy): the script's
    error, exit 1.
    """
    spec = resolved.module_spec
    loader = getattr(spec, "loader", None)
    code = loader.get_code(spec.name) if loader is not None else None
    if code is None:
        raise LaunchError(
            f"no code object available for {resolved.target.name}", EXIT_TARGET_INVALID
        )
    module = types.ModuleType("__main__")
    module.__dict__.update(
        {
            "__file__": spec.origin,
            "__cached__": spec.cached,
            "__doc__": None,
            "__loader__": loader,
            "__package__": spec.parent,
            "__spec__": spec,
            "__builtins__": builtins,
        }
    )
    return MainModule(code, module)
