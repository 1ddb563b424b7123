"""Stop signals wait while the reports are written (issue 25 item 2).

A Ctrl-C, SIGTERM or SIGHUP that lands while the reports are analysed and written used to cut
that work anywhere: in the middle of matplotlib's import, which left a half-initialised
module behind, so the partial report that perfdoctor then tried to write failed too
("module 'matplotlib' has no attribute 'get_data_path'") and no report was left at all.
Inside `deferred_stop_signals()` such a signal is held: the block finishes, then the signal
is delivered to the handler that was there before (cli_guard turns it into errors.Stopped,
whose exit code is 128 + the signal's number; Ctrl-C into KeyboardInterrupt, 130). A second
stop signal while one is held is delivered at once: the user insists (as with pip or apt).

Writing the reports takes seconds, so holding a stop for that long is what a harness's grace
period (SIGTERM, then SIGKILL seconds later) allows; the training child is never behind one
of these blocks (it has already ended, or been stopped, before the reports are written).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

DEFERRED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# Test-only: "<marker path>:<seconds>". The first write_reports of the process then creates
# <marker path>, sleeps that long inside the deferred block, and appends "done" to the
# marker, so a test can send a signal while the reports are being written
# (tests/integration/test_stop_while_reporting.py).
TEST_HOLD_ENV = "PERFDOCTOR_TEST_HOLD_REPORTS"

_active = False  # a deferred block is running (nested ones leave the holding to it)

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@contextlib.contextmanager
def deferred_stop_signals() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends, then deliver the first one."""
    global _active
    if _active or threading.current_thread() is not threading.main_thread():
        # Nested: the outer block holds the signals (and delivers them once, at its end).
        # Elsewhere than the main thread handlers cannot be set: nothing to hold.
        yield
        return
    held: list[int] = []
    previous: dict[int, _Handler] = {}

    def hold(signum: int, frame: FrameType | None) -> None:
        if held:  # a second stop while one is held: deliver it now, and only it
            held.clear()
            _restore(previous)
            previous.clear()
            signal.raise_signal(signum)
            return
        held.append(signum)
        log.info("%s while the reports are written: held until they are", _name(signum))

    for name in DEFERRED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:  # SIGHUP does not exist on Windows
            continue
        current = signal.getsignal(sig)
        if current == signal.SIG_IGN:
            continue  # ignored on purpose (nohup): stays ignored
        previous[sig] = current
        signal.signal(sig, hold)
    _active = True
    try:
        yield
    finally:
        _active = False
        _restore(previous)
        if held:
            # Delivered to the handler that was there before: Stopped / KeyboardInterrupt,
            # raised from here, or the default action (exit by the signal).
            signal.raise_signal(held[0])


def _restore(previous: dict[int, _Handler]) -> None:
    for sig, handler in previous.items():
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def hold_for_tests() -> None:
    """The test-only pause of TEST_HOLD_ENV (a no-op unless the variable is set)."""
    spec = os.environ.pop(TEST_HOLD_ENV, None)  # once: a partial report after it is not held
    if not spec:
        return
    marker, _, seconds = spec.rpartition(":")
    path = Path(marker)
    path.write_text("writing\n")
    time.sleep(float(seconds))
    with path.open("a") as fh:
        fh.write("done\n")
