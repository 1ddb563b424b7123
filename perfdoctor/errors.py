"""Errors a user can cause, each with a one-line message and a documented exit code.

Exit codes of `perfdoctor` (README, "Exit codes"):

    0         success
    1..63     the user's script failed: its own exit code is passed through (an uncaught
              exception in the script gives 1, as plain `python script.py` would)
    2         command-line usage error (bad option)
    64        internal error in perfdoctor itself (a bug: please report it, with --debug)
    65        the target is not a runnable Python script (not .py, binary, syntax error)
    66        the target was not found (missing file, a directory, unknown module)
    67        the script never trained: no optimizer step, backward or model forward was seen
    68        not a perfdoctor run directory, or one of its artifacts is corrupt or untrusted
    69        a required tool is missing (e.g. tensorboard for `perfdoctor tensorboard`)
    70        `perfdoctor compare --fail-if-slower/--fail-if-more-memory`: B regressed beyond
              the limit and the noise (or, with --strict, could not be told from noise)
    124       the script ran past --timeout and was stopped (artifacts are kept)
    130       interrupted (Ctrl-C)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERNAL = 64
EXIT_TARGET_INVALID = 65
EXIT_TARGET_NOT_FOUND = 66
EXIT_NO_TRAINING = 67
EXIT_BAD_RUN_DIR = 68
EXIT_MISSING_TOOL = 69
EXIT_REGRESSION = 70
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130


class PerfdoctorError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class TargetNotFound(PerfdoctorError):
    exit_code = EXIT_TARGET_NOT_FOUND


class TargetInvalid(PerfdoctorError):
    exit_code = EXIT_TARGET_INVALID


class NoTrainingSteps(PerfdoctorError):
    exit_code = EXIT_NO_TRAINING


class BadRunDir(PerfdoctorError):
    exit_code = EXIT_BAD_RUN_DIR


class CorruptArtifact(BadRunDir):
    """A trace, snapshot or JSON file that cannot be read."""


class UntrustedPickle(CorruptArtifact):
    """A memory snapshot that holds anything but plain containers and scalars."""


class MissingTool(PerfdoctorError):
    exit_code = EXIT_MISSING_TOOL


class RunTimeout(PerfdoctorError):
    exit_code = EXIT_TIMEOUT
