"""Errors a user can cause, each with a one-line message and a documented exit code.

Exit codes of `perfdoctor` (README, "Exit codes"):

    0         success
    1..255    the user's script failed: its own exit code is passed through (an uncaught
              exception in the script gives 1, as plain `python script.py` would; a script
              killed by signal n gives 128+n). The terminal's last line then says it was the
              script, so a script's own 64..69 cannot be read as perfdoctor's.
    2         command-line usage error (bad option)
    64        internal error in perfdoctor itself (a bug: please report it, with --debug)
    65        the target is not a runnable Python script (not .py, binary, syntax error)
    66        the target was not found (missing file, a directory, unknown module)
    67        the script never trained: no optimizer step, backward or model forward was seen
    68        not a perfdoctor run directory, or one of its artifacts is corrupt or untrusted
    69        a required tool is missing (e.g. tensorboard for `perfdoctor tensorboard`,
              torch-tb-profiler's trace viewer for `perfdoctor view`)
    70        `perfdoctor compare --fail-if-slower/--fail-if-more-memory`: B regressed beyond
              the limit and the noise, or could not be measured (or, with --strict, could not
              be told from noise)
    71        `perfdoctor compare --fail-if-...`: undecided, the noise band straddles the limit;
              record more runs per side (`perfdoctor profile --no-apply --repeat N`)
    73        the output directory cannot be written (`--out` is a file, no permission, a
              read-only file system, the disk full during the run); as sysexits' EX_CANTCREAT
    124       the script ran past --timeout and was stopped (artifacts are kept)
    129       perfdoctor was stopped by SIGHUP (its terminal closed): as 130
    130       interrupted (Ctrl-C): the script's process tree is stopped, the manifest and a
              partial report are written
    143       perfdoctor was stopped by SIGTERM (kill, timeout(1), Slurm, CI cancel): as 130
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
# The gate could not tell B from A at its limit: neither passed nor failed, so a CI job can
# neither merge on it silently nor read it as a regression (`|| [ $? -eq 71 ]` accepts it).
EXIT_UNDECIDED = 71
# perfdoctor's own output could not be written: neither the script's fault (1..255) nor a bug
# (64); sysexits' EX_CANTCREAT.
EXIT_OUTPUT_UNWRITABLE = 73
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130  # SIGINT: 128 + 2


def exit_code_for_signal(signum: int) -> int:
    """The shell's convention for a death by signal `signum`."""
    return 128 + int(signum)


class Stopped(KeyboardInterrupt):
    """perfdoctor itself got SIGTERM or SIGHUP: handled exactly as Ctrl-C is (every
    `except KeyboardInterrupt` stops the child's process tree and keeps its artifacts),
    but ends with 128 + the signal's number."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = int(signum)
        self.name = name

    @property
    def exit_code(self) -> int:
        return exit_code_for_signal(self.signum)


def interrupt_exit_code(err: BaseException) -> int:
    """130 for Ctrl-C, 128+n for a signal perfdoctor was stopped by."""
    return err.exit_code if isinstance(err, Stopped) else EXIT_INTERRUPTED


def interrupt_name(err: BaseException) -> str:
    """How the user stopped perfdoctor, for messages and the session record."""
    return err.name if isinstance(err, Stopped) else "Ctrl-C"


class PerfdoctorError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(PerfdoctorError):
    """A bad command line: exit code 2, as click gives for its own usage errors."""

    exit_code = EXIT_USAGE


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


class ProfileStopped(PerfdoctorError):
    """perfdoctor was stopped (Ctrl-C, SIGTERM, SIGHUP) after the partial report was written;
    its exit code is the interruption's (130, or 128 + the signal's number)."""

    def __init__(self, message: str, *, exit_code: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = exit_code


class OutputUnwritable(PerfdoctorError):
    """perfdoctor cannot write where its output goes (`--out`): not a directory, no
    permission, a read-only file system, no space left."""

    exit_code = EXIT_OUTPUT_UNWRITABLE


class MissingTool(PerfdoctorError):
    exit_code = EXIT_MISSING_TOOL


class RunTimeout(PerfdoctorError):
    exit_code = EXIT_TIMEOUT


# A script's error message as one line: its lines joined, clipped to this many characters.
# The last line alone misleads: dynamo's backend failure ends "Set TORCHDYNAMO_VERBOSE=1 ...",
# a torch C++ error's message ends in a lone quote.
ERROR_MESSAGE_MAX = 600


def one_line_message(text: str, limit: int = ERROR_MESSAGE_MAX) -> str:
    """Every non-empty line of `text`, stripped, joined by " | ", clipped to `limit`."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
