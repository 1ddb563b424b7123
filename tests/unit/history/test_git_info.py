"""The commit of the script's repository, as recorded when a session starts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from perfdoctor.history.git_info import git_state

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_commit_and_dirty(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "src" / "train.py").write_text("print(1)\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_state(repo / "src") == {"commit": head, "dirty": False}
    (repo / "untracked.txt").write_text("x")  # untracked files do not count
    assert git_state(repo / "src") == {"commit": head, "dirty": False}
    (repo / "src" / "train.py").write_text("print(2)\n")
    assert git_state(repo / "src") == {"commit": head, "dirty": True}


def test_outside_a_repository_or_before_a_commit(tmp_path: Path):
    assert git_state(tmp_path / "missing") is None
    plain = tmp_path / "plain"
    plain.mkdir()
    _git(plain, "init", "-q")  # a repository without a commit has no HEAD
    assert git_state(plain) is None
