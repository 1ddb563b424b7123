"""keep_this_threads_state on a thread that C started, as gloo's workers are: the Python state
made for a callback outlives the callback, so torch's profiler never holds a freed one
(collect/thread_state.py says why). The thread here is a real pthread started through ctypes,
whose callbacks get and free a state per call exactly as a C++ library's do."""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

import pytest

from perfdoctor.collect.thread_state import keep_this_threads_state, started_outside_python

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or sys.implementation.name != "cpython",
    reason="pthreads through ctypes, and CPython's thread states",
)

_api = ctypes.pythonapi
_api.PyInterpreterState_Get.restype = ctypes.c_void_p
_api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
_api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
_api.PyThreadState_Next.restype = ctypes.c_void_p
_api.PyThreadState_Next.argtypes = [ctypes.c_void_p]

_THREAD_MAIN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def thread_states() -> int:
    """How many Python thread states the interpreter holds now."""
    count, state = 0, _api.PyInterpreterState_ThreadHead(_api.PyInterpreterState_Get())
    while state:
        count += 1
        state = _api.PyThreadState_Next(state)
    return count


def run_on_a_c_thread(body: Callable[[], None]) -> dict[str, bool]:
    """Run `body` on a thread started by pthread_create, as a C++ library's callback; return
    what the thread saw."""
    libc = ctypes.CDLL(None)
    seen: dict[str, bool] = {}

    def main(_arg: int | None) -> None:
        seen["outside"] = started_outside_python()
        body()

    entry = _THREAD_MAIN(main)  # referenced until the join: the thread calls it
    thread = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(thread), None, entry, None) == 0
    assert libc.pthread_join(thread, None) == 0
    return seen


def test_a_c_threads_state_is_freed_after_a_callback_unless_kept() -> None:
    before = thread_states()
    seen = run_on_a_c_thread(lambda: None)
    assert seen["outside"]
    assert thread_states() == before  # what the profiler trips on: the state is gone again

    run_on_a_c_thread(keep_this_threads_state)
    assert thread_states() == before + 1  # kept: it lives as long as its thread


def test_threads_python_started_are_left_alone() -> None:
    assert not started_outside_python()  # the main thread
    before = thread_states()
    outside: list[bool] = []

    def body() -> None:
        outside.append(started_outside_python())
        keep_this_threads_state()

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert outside == [False]
    assert thread_states() == before  # no reference taken: its state went with the thread


class _Future:
    """Stands in for a torch future: keeps the callback that `then` is given."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[object], object]] = []

    def then(self, callback: Callable[[object], object]) -> _Future:
        self.callbacks.append(callback)
        return self

    def value(self) -> str:
        return "reduced bucket"


def test_the_ddp_bucket_timer_keeps_the_gloo_threads_state() -> None:
    from perfdoctor.collect.comm_watch import CommWatch

    watch = CommWatch(torch=None)
    future = _Future()
    watch._timed_hook(lambda _state, _bucket: future)(None, None)
    (callback,) = future.callbacks
    before = thread_states()
    passed_on: list[object] = []
    run_on_a_c_thread(lambda: passed_on.append(callback(future)))
    assert passed_on == ["reduced bucket"]
    assert watch.seen  # the bucket was timed
    assert thread_states() == before + 1
