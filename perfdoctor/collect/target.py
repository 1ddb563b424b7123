"""Check that a target can be run before any child is spawned.

The parent must never import the user's script (importing runs it), so a script is only read
and `compile()`d: that catches a missing file, a directory, a binary or non-Python file and a
syntax error with one clear line, before a run directory fills up with a failed launch.
Module targets (`-m pkg.mod`) are not checked here: finding a submodule imports its parent
packages, so the child reports a missing module instead (exit 66, observations["launch_error"]).
"""

from __future__ import annotations

import io
import shutil
import tokenize
import warnings
from pathlib import Path

from perfdoctor.errors import TargetInvalid, TargetNotFound
from perfdoctor.model import Target

PYTHON_SUFFIXES = (".py", ".pyw")
# Enough to see a shebang line and to tell text from binary without reading a huge file twice.
_SNIFF_BYTES = 8192


def validate_target(target: Target, cwd: Path) -> None:
    """Raise TargetNotFound / TargetInvalid when `target` cannot run as `python target`."""
    if target.kind == "module":
        _validate_module_name(target.name)
        return
    if target.kind == "command":
        if shutil.which(target.name) is None:
            raise TargetNotFound(f"{target.name}: command not found", hint="is it on PATH?")
        return
    path = Path(target.name)
    if not path.is_absolute():
        path = cwd / path
    shown = target.name
    if not path.exists():
        raise TargetNotFound(f"{shown}: no such file", hint=f"looked in {cwd}")
    if path.is_dir():
        hint = (
            "it holds a __main__.py: run it as a module with -m, or pass the script inside it"
            if (path / "__main__.py").is_file()
            else "pass the training script inside it"
        )
        raise TargetNotFound(f"{shown}: is a directory, not a Python script", hint=hint)
    try:
        source = path.read_bytes()
    except OSError as err:
        raise TargetInvalid(f"{shown}: cannot be read ({err.strerror or err})") from err
    if b"\0" in source[:_SNIFF_BYTES]:
        raise TargetInvalid(f"{shown}: is a binary file, not a Python script")
    if path.suffix.lower() not in PYTHON_SUFFIXES and not _has_python_shebang(source):
        raise TargetInvalid(
            f"{shown}: not a Python script (expected a .py file)",
            hint="an extension-less script needs a python shebang line (#!/usr/bin/env python)",
        )
    _check_text(source, shown)
    _compile_check(source, shown)


def is_command(first: str, cwd: Path) -> bool:
    """`perfdoctor profile -- torchrun ...`: the first word is a program on PATH (a launcher,
    `python`), not a script file here."""
    path = Path(first) if Path(first).is_absolute() else cwd / first
    if path.suffix.lower() in PYTHON_SUFFIXES or path.exists():
        return False
    return shutil.which(first) is not None


def _validate_module_name(name: str) -> None:
    parts = name.split(".")
    if not name or not all(part.isidentifier() for part in parts):
        raise TargetInvalid(f"-m {name}: not a valid Python module name")


def _has_python_shebang(source: bytes) -> bool:
    first_line = source[:_SNIFF_BYTES].split(b"\n", 1)[0]
    return first_line.startswith(b"#!") and b"python" in first_line


def _check_text(source: bytes, shown: str) -> None:
    """A file that does not decode in its declared encoding (UTF-8 by default) is not source."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as err:
        if err.msg.startswith("unknown encoding"):  # a coding cookie Python does not know
            raise TargetInvalid(f"{shown}: {err.msg}") from err
        # Undecodable first lines ("invalid or missing encoding declaration").
        raise TargetInvalid(f"{shown}: is a binary file or not UTF-8 text") from err
    try:
        source.decode(encoding)
    except UnicodeDecodeError as err:
        raise TargetInvalid(
            f"{shown}: is a binary file or not {encoding} text (byte {err.start})"
        ) from err


def _compile_check(source: bytes, shown: str) -> None:
    # compile() honours the PEP 263 encoding cookie when it is given bytes, exactly as the
    # interpreter would when running the file; warnings (e.g. invalid escapes) are the
    # script's business and must not be printed by the parent.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, shown, "exec", dont_inherit=True)
        except SyntaxError as err:
            kind = type(err).__name__  # SyntaxError, IndentationError, TabError
            line = f":{err.lineno}" if err.lineno else ""
            raise TargetInvalid(f"{shown}{line}: {kind}: {err.msg}") from err
        except (ValueError, UnicodeDecodeError) as err:
            # Null bytes past the sniffed prefix, or bytes that are not in the declared encoding.
            raise TargetInvalid(f"{shown}: not a readable Python source file ({err})") from err
