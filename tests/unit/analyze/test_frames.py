from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze.frames import UserCode, parse_frame_name


def test_parse_frame_name() -> None:
    f = parse_frame_name("models/net.py(42): forward")
    assert f is not None and (f.file, f.line, f.function) == ("models/net.py", 42, "forward")
    assert parse_frame_name("<built-in method item of Tensor object at 0x7f>") is None
    assert parse_frame_name("nn.Module: Linear_0") is None


@pytest.mark.parametrize(
    ("path", "is_user"),
    [
        ("train.py", True),
        ("models/net.py", True),
        ("/home/someone/project/train.py", True),
        ("torch/nn/modules/module.py", False),
        ("typing.py", False),
        ("json/encoder.py", False),
        ("<frozen importlib._bootstrap>", False),
        ("/opt/venv/lib/python3.11/site-packages/timm/models/vit.py", False),
        ("perfdoctor/collect/runtime.py", False),
        ("??", False),
        ("c10/core/Allocator.cpp", False),
    ],
)
def test_user_code_classification(path: str, is_user: bool) -> None:
    assert UserCode().is_user_file(path) is is_user


def test_a_file_under_the_users_root_wins_over_a_library_name(tmp_path: Path) -> None:
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "images.py").write_text("")
    assert not UserCode().is_user_file("datasets/images.py")
    assert UserCode([tmp_path]).is_user_file("datasets/images.py")


def test_perfdoctor_frames_are_never_the_users_even_from_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "perfdoctor" / "collect").mkdir(parents=True)
    (tmp_path / "perfdoctor" / "collect" / "runtime.py").write_text("")
    assert not UserCode([tmp_path]).is_user_file("perfdoctor/collect/runtime.py")


def test_display_relative_to_root(tmp_path: Path) -> None:
    user = UserCode([tmp_path])
    assert user.display(str(tmp_path / "a" / "b.py")) == "a/b.py"
    assert user.display("/elsewhere/c.py") == "/elsewhere/c.py"


def test_the_longest_directory_that_holds_a_file_owns_it() -> None:
    # One classifier for the child's live frames and the analysis: the target's root wins
    # over a site-packages that holds it, and loses to a virtualenv inside it.
    site = "/home/u/.venv/lib/python3.11/site-packages"
    inside_site = UserCode([f"{site}/mypkg"], library_dirs=[site])
    assert inside_site.is_user_file(f"{site}/mypkg/train.py")
    assert not inside_site.is_user_file(f"{site}/torch/nn/modules/module.py")
    project = UserCode(["/home/u/proj"], library_dirs=[])
    assert project.is_user_file("/home/u/proj/train.py")
    assert project.is_user_file("/home/u/proj/train")  # a script run through its shebang
    assert not project.is_user_file("/home/u/proj/.venv/lib/python3.11/site-packages/x.py")
    assert not project.is_user_file("/home/u/proj/csrc/kernel.cpp")


def test_perfdoctors_own_package_is_library_code_in_the_child() -> None:
    import perfdoctor

    user = UserCode.for_target(str(Path(perfdoctor.__file__).parents[1]), "/")
    assert not user.is_user_file(perfdoctor.__file__)


def test_locations_are_shown_relative_to_the_cwd(tmp_path: Path) -> None:
    user = UserCode([tmp_path], cwd=tmp_path, library_dirs=[])
    loc = user.location(str(tmp_path / "models" / "net.py"), 7, "forward")
    assert loc == {"file": "models/net.py", "line": 7, "function": "forward"}
    assert user.location("/elsewhere/x.py", 1, "f")["file"] == "/elsewhere/x.py"
