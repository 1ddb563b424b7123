"""SIGTERM / SIGHUP to perfdoctor become errors.Stopped (a KeyboardInterrupt), so that every
`except KeyboardInterrupt` stops the child's tree as Ctrl-C does; an ignored signal (nohup)
stays ignored. (The whole path, child processes included: tests/integration/test_signals.py.)"""

from __future__ import annotations

import os
import signal
import time

import pytest
from load_limits import scaled

from perfdoctor.cli_guard import stop_signals_as_interrupts
from perfdoctor.errors import Stopped, interrupt_exit_code, interrupt_name


def _wait_for_signal() -> None:
    deadline = time.monotonic() + scaled(5)
    while time.monotonic() < deadline:
        time.sleep(0.01)
    pytest.fail("the signal was not delivered")


@pytest.fixture(autouse=True)
def _restore_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_sigterm_raises_stopped_with_exit_code_143_and_a_second_one_is_ignored() -> None:
    with pytest.raises(Stopped) as caught, stop_signals_as_interrupts():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_for_signal()
        finally:
            # Still stopping (writing the partial report): a repeated SIGTERM must not cut
            # that short.
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    assert isinstance(caught.value, KeyboardInterrupt)
    assert interrupt_exit_code(caught.value) == 143
    assert interrupt_name(caught.value) == "SIGTERM"


def test_an_ignored_sighup_stays_ignored_and_handlers_are_restored() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    before_term = signal.getsignal(signal.SIGTERM)
    with stop_signals_as_interrupts():
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) != before_term
        os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) == before_term


def test_ctrl_c_keeps_its_own_code() -> None:
    assert interrupt_exit_code(KeyboardInterrupt()) == 130
    assert interrupt_name(KeyboardInterrupt()) == "Ctrl-C"
