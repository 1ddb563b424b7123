"""Keep the Python thread state of a thread Python did not start (gloo's workers) for that
thread's life, so torch's profiler never meets one that is freed under it.

A C++ thread that calls into Python (a future's done-callback on one of gloo's worker
threads) gets a fresh `PyThreadState` for the call and frees it right after. torch's profiler
with Python stacks (`with_stack=True`, the Python tracer) registers every thread state alive
when it starts and reads them again when it stops: a state freed in between is a dangling
pointer, and the process dies of SIGSEGV or SIGABRT in the profiler's stop
(`TorchOpStorage::materialize` <- `RecordQueue::getRecords` <- `disableProfiler`).

A plain DDP script runs no Python on those threads; perfdoctor's timer on DDP's all-reduce
(collect/comm_watch.py) does, through torch's own Python `allreduce_hook`. So each of
perfdoctor's callbacks that can run on such a thread takes one extra reference to the thread's
state (`PyGILState_Ensure`, never released): the state then lives as long as the thread, as
it does for threads Python starts, and every later callback on it, torch's own included,
reuses it. The cost is one state per gloo worker thread (a process group has two by default).

Measured (benchmarks/README.md, "Python callbacks on gloo threads under the profiler"), the
worst case: two gloo ranks, each starting and stopping the profiler 1,000 times around 16 async
all-reduces whose Python callbacks run into the next start. Without this, 13 of 16 runs
crashed; with it, 3 of 24. What is left is another race in torch, most likely a gloo thread
recording while the profiler collects; DDP waits for its buckets before backward returns, so
in a training step no callback is running when perfdoctor starts or stops the profiler.
"""

from __future__ import annotations

import ctypes
import threading

# Per thread state, not per thread id: a `threading.local` lives in the state's own dict, so
# a thread that gets a new state (its old one freed: the case this module is for) is seen anew.
_seen = threading.local()


def started_outside_python() -> bool:
    """Whether the calling thread was started by C/C++ code, not by Python's threading: for
    such a thread `threading` makes a stand-in `_DummyThread` on first use."""
    dummy = getattr(threading, "_DummyThread", None)
    return dummy is not None and isinstance(threading.current_thread(), dummy)


def keep_this_threads_state() -> None:
    """Make the calling thread's Python state live as long as the thread (once per state;
    nothing for threads Python started, whose state already does)."""
    if getattr(_seen, "done", False):
        return
    _seen.done = True
    if started_outside_python():
        # One more reference to this thread's state, never given back: the caller that made
        # the state for this call then leaves it alive when it lets go of its own reference.
        ctypes.pythonapi.PyGILState_Ensure()
