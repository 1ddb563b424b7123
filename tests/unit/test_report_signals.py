"""report_signals.deferred_stop_signals: a stop signal inside the block waits for its end and
then reaches the handler that was there before; a second one is delivered at once; nesting
holds once; an ignored signal stays ignored."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from perfdoctor.report_signals import deferred_stop_signals


class Delivered(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@pytest.fixture
def raising_handlers() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Delivered, as cli_guard's handler raises Stopped."""

    def handler(signum: int, _frame: object) -> None:
        raise Delivered(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler_before in old.items():
            signal.signal(sig, handler_before)


@pytest.mark.usefixtures("raising_handlers")
def test_a_signal_in_the_block_is_delivered_after_it() -> None:
    finished = []
    with pytest.raises(Delivered) as caught, deferred_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes run: a handler would have run by now
            pass
        finished.append(True)
    assert finished == [True]
    assert caught.value.signum == signal.SIGTERM
    # The handler before the block is back.
    with pytest.raises(Delivered):
        os.kill(os.getpid(), signal.SIGHUP)


@pytest.mark.usefixtures("raising_handlers")
def test_a_second_signal_is_delivered_at_once() -> None:
    reached = []
    with pytest.raises(Delivered) as caught, deferred_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        reached.append("after the first")
        os.kill(os.getpid(), signal.SIGHUP)
        reached.append("after the second")
    assert reached == ["after the first"]
    assert caught.value.signum == signal.SIGHUP


@pytest.mark.usefixtures("raising_handlers")
def test_nested_blocks_hold_until_the_outer_one_ends() -> None:
    steps = []
    with pytest.raises(Delivered), deferred_stop_signals():
        with deferred_stop_signals():
            os.kill(os.getpid(), signal.SIGTERM)
        steps.append("inner ended, still held")
    assert steps == ["inner ended, still held"]


@pytest.mark.usefixtures("raising_handlers")
def test_no_signal_no_change() -> None:
    with deferred_stop_signals():
        value = 1
    assert value == 1
    with pytest.raises(Delivered):
        os.kill(os.getpid(), signal.SIGTERM)


def test_an_ignored_signal_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with deferred_stop_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_ctrl_c_becomes_keyboard_interrupt_after_the_block() -> None:
    # Python's own Ctrl-C handler, as in a terminal: a suite started in the background of a
    # non-interactive shell inherits SIGINT ignored.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        done = []
        with pytest.raises(KeyboardInterrupt), deferred_stop_signals():
            os.kill(os.getpid(), signal.SIGINT)
            done.append(True)
        assert done == [True]
    finally:
        signal.signal(signal.SIGINT, old)
