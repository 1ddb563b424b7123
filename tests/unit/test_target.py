"""validate_target: one clear error per kind of unrunnable target, without importing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.collect.target import validate_target
from perfdoctor.errors import (
    EXIT_TARGET_INVALID,
    EXIT_TARGET_NOT_FOUND,
    TargetInvalid,
    TargetNotFound,
)
from perfdoctor.model import Target


def script(name: str) -> Target:
    return Target(kind="script", name=name)


def test_valid_script_passes_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    validate_target(script("train.py"), tmp_path)
    assert not marker.exists()


def test_absolute_path_ignores_cwd(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text("x = 1\n")
    validate_target(script(str(path)), tmp_path / "elsewhere")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TargetNotFound, match=r"^nope\.py: no such file$") as info:
        validate_target(script("nope.py"), tmp_path)
    assert info.value.exit_code == EXIT_TARGET_NOT_FOUND


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    with pytest.raises(TargetNotFound, match="is a directory"):
        validate_target(script("pkg"), tmp_path)


def test_directory_with_main_hints_at_module_form(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__main__.py").write_text("x = 1\n")
    with pytest.raises(TargetNotFound) as info:
        validate_target(script("pkg"), tmp_path)
    assert info.value.hint is not None and "-m" in info.value.hint


def test_non_python_extension(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("echo hi\n")
    with pytest.raises(TargetInvalid, match="not a Python script") as info:
        validate_target(script("run.sh"), tmp_path)
    assert info.value.exit_code == EXIT_TARGET_INVALID


def test_extensionless_with_python_shebang_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "train").write_text("#!/usr/bin/env python3\nprint('hi')\n")
    validate_target(script("train"), tmp_path)


def test_extensionless_with_other_shebang_is_refused(tmp_path: Path) -> None:
    (tmp_path / "train").write_text("#!/bin/bash\necho hi\n")
    with pytest.raises(TargetInvalid, match="not a Python script"):
        validate_target(script("train"), tmp_path)


def test_binary_file_with_null_bytes(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    with pytest.raises(TargetInvalid, match="binary"):
        validate_target(script("model.py"), tmp_path)


def test_binary_file_without_null_bytes(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_bytes(b"\xff\xfe\xfa\x81 weights")
    with pytest.raises(TargetInvalid, match="binary"):
        validate_target(script("model.py"), tmp_path)


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import os\n\ndef f(:\n    pass\n")
    with pytest.raises(TargetInvalid, match=r"^train\.py:3: SyntaxError: ") as info:
        validate_target(script("train.py"), tmp_path)
    assert "\n" not in str(info.value)


def test_indentation_error_keeps_its_name(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def f():\nreturn 1\n")
    with pytest.raises(TargetInvalid, match=r"^train\.py:2: IndentationError: "):
        validate_target(script("train.py"), tmp_path)


def test_encoding_cookie_is_honoured(tmp_path: Path) -> None:
    source = "# -*- coding: latin-1 -*-\nname = 'café'\n".encode("latin-1")
    (tmp_path / "train.py").write_bytes(source)
    validate_target(script("train.py"), tmp_path)


def test_unknown_encoding_cookie(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("# -*- coding: klingon -*-\nx = 1\n")
    with pytest.raises(TargetInvalid, match="unknown encoding"):
        validate_target(script("train.py"), tmp_path)


def test_syntax_warnings_are_not_errors(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("path = '\\d+'\nassert (path, 'msg')\n")
    validate_target(script("train.py"), tmp_path)


def test_module_target_is_not_imported(tmp_path: Path) -> None:
    # A module that does not exist passes: the child reports it (it would have to import
    # parent packages to look for it, which runs user code).
    validate_target(Target(kind="module", name="surely_not_a_module.train"), tmp_path)


@pytest.mark.parametrize("name", ["", "pkg-name.train", "pkg..train", "1pkg"])
def test_module_name_must_be_dotted_identifiers(tmp_path: Path, name: str) -> None:
    with pytest.raises(TargetInvalid, match="not a valid Python module name"):
        validate_target(Target(kind="module", name=name), tmp_path)


def test_a_launcher_on_path_is_a_command_and_a_script_file_is_not(tmp_path: Path) -> None:
    from perfdoctor.collect.target import is_command

    (tmp_path / "train").write_text("#!/usr/bin/env python\n")
    assert is_command("sh", tmp_path)  # any program on PATH, as torchrun or accelerate
    assert not is_command("train", tmp_path)  # a script file here wins over PATH
    assert not is_command("train.py", tmp_path)
    assert not is_command("no-such-launcher-here", tmp_path)


def test_a_missing_command_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(TargetNotFound, match="command not found"):
        validate_target(Target(kind="command", name="no-such-launcher-here"), tmp_path)
    validate_target(Target(kind="command", name="sh", argv=("-c", "true")), tmp_path)
