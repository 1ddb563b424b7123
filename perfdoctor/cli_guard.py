"""How every `perfdoctor` command ends: one clear line and a documented exit code for anything
a user can cause (README, "Exit codes"), 64 for a bug, and SIGTERM/SIGHUP handled as Ctrl-C.

`--debug` reaches the guard through the click context (CliSettings), not a global.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import typer
from rich.console import Console

from perfdoctor.errors import (
    EXIT_INTERNAL,
    OutputUnwritable,
    PerfdoctorError,
    ProfileStopped,
    Stopped,
    interrupt_exit_code,
)

log = logging.getLogger(__name__)

Command = TypeVar("Command", bound=Callable[..., Any])


@dataclass(frozen=True)
class CliSettings:
    """The options given before the command (`perfdoctor --debug report ...`): ctx.obj."""

    debug: bool = False


def make_console(file=None) -> Console:
    # Imported lazily: rendering modules are not needed for --help.
    from perfdoctor.render.terminal import make_console as _make

    return _make(file)


def stderr_console() -> Console:
    return make_console(sys.stderr)


def fail(err: PerfdoctorError) -> typer.Exit:
    """Print `err` as the one error line (and its hint); the Exit to raise with its code."""
    from rich.markup import escape

    from perfdoctor.render.format import printable

    console = stderr_console()
    # The message may name a file or value from an artifact: no markup, no control characters.
    message = escape(printable(str(err)))
    console.print(f"[bold red]perfdoctor: error:[/] {message}", markup=True, soft_wrap=True)
    if err.hint:
        console.print(f"  hint: {printable(err.hint)}", markup=False, soft_wrap=True)
    return typer.Exit(err.exit_code)


# SIGTERM (kill, timeout(1), Slurm, CI cancellation) and SIGHUP (the terminal closed) stop
# perfdoctor as Ctrl-C does; their exit code is 128 + the signal's number.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def stop_signals_as_interrupts() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into errors.Stopped (a KeyboardInterrupt) in the main thread.

    Without this, Python dies at once on SIGTERM: no manifest, no report, and the child
    (in its own session, so the signal never reaches it) keeps training, re-parented to init.
    A repeated signal while perfdoctor is already stopping is ignored, so that the child's
    grace period and the partial report are not cut short (Ctrl-C still cuts them short).
    """
    stopping: dict[str, str | None] = {"by": None}

    def handler(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stopping["by"] is not None:
            log.info("%s while stopping: ignored", name)
            return
        stopping["by"] = name
        raise Stopped(signum, name)

    previous = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:  # SIGHUP does not exist on Windows
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue  # ignored on purpose (nohup ignores SIGHUP): leave it ignored
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (perfdoctor called from a library)
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)


def _print_traceback() -> None:
    sys.stderr.write(traceback.format_exc())


def run_guarded(debug: bool, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn`; anything a user can cause ends in one line and its documented exit code.

    With `debug` the traceback is printed too, and the exit code stays the documented one
    (never 1, which is what a failing user script returns). Click's own usage errors and
    typer.Exit pass through untouched.
    """
    try:
        with stop_signals_as_interrupts():
            try:
                result = fn(*args, **kwargs)
            except typer.Exit:
                _flush_stdout()
                raise
            _flush_stdout()
            return result
    except OSError as err:
        if err.errno not in NO_ROOM:
            return _internal_error(err, debug)
        if debug:
            _print_traceback()
        raise fail(output_unwritable(err)) from None
    except ProfileStopped as err:
        console = stderr_console()
        console.print(f"perfdoctor: {err}", markup=False, soft_wrap=True)
        if err.hint:
            console.print(f"  {err.hint}", markup=False, soft_wrap=True)
        raise typer.Exit(err.exit_code) from None
    except PerfdoctorError as err:
        if debug:
            _print_traceback()
        raise fail(err) from None
    except KeyboardInterrupt as err:
        what = "interrupted" if not isinstance(err, Stopped) else f"stopped by {err.name}"
        stderr_console().print(f"perfdoctor: {what}", markup=False)
        raise typer.Exit(interrupt_exit_code(err)) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:
        if _is_click_exception(err):
            raise
        return _internal_error(err, debug)


def _internal_error(err: Exception, debug: bool) -> Any:
    if debug:
        _print_traceback()
    stderr_console().print(
        f"perfdoctor: internal error: {type(err).__name__}: {_printable(str(err))}"
        + ("" if debug else " (run again with --debug for the traceback)"),
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_INTERNAL) from None


# Errors only a write can meet: no room left (a full disk, a quota, a file too large) or a
# file system that turned read-only. Whatever perfdoctor was writing (a report, a run
# directory, stdout redirected to a full disk), it is its output that cannot be written: 73.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def output_unwritable(
    err: OSError, where: str | os.PathLike[str] | None = None
) -> OutputUnwritable:
    """The one line for an OSError met while writing perfdoctor's output."""
    target = err.filename if err.filename is not None else where
    what = (
        f"cannot write {os.fsdecode(target)}" if target is not None else "cannot write its output"
    )
    return OutputUnwritable(
        f"{what}: {err.strerror or err}",
        hint="free some space, or write somewhere else (-o / --out)",
    )


def _flush_stdout() -> None:
    """Flush stdout now, inside the guard: a full disk behind a redirection must end in one
    line and 73, not in an interpreter's 'Exception ignored' at exit. After a failed flush
    stdout points at /dev/null, so the exit's own flush of what is left cannot fail again."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        raise


def _printable(text: str) -> str:
    from perfdoctor.render.format import printable

    return printable(text)


def _is_click_exception(err: Exception) -> bool:
    # Click's usage errors (exit code 2) are click's to print; typer may bring its own copy
    # of click, so the class is found by name along the MRO.
    return any(cls.__name__ == "ClickException" for cls in type(err).__mro__)


def guarded(command: Command) -> Command:
    """Decorates a typer command whose first parameter is `ctx: typer.Context`: its whole
    body runs under `run_guarded`, with --debug taken from the context."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        ctx = kwargs.get("ctx", args[0] if args else None)
        settings = getattr(ctx, "obj", None)
        debug = isinstance(settings, CliSettings) and settings.debug
        return run_guarded(debug, command, *args, **kwargs)

    return run  # type: ignore[return-value]
