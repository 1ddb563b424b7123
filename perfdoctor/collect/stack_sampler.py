"""Which of the user's lines the main thread is running, sampled per step.

The step hooks time what happens between optimizer steps but cannot say where: a
policy-gradient loop's rollout (a simulator in plain Python plus a no_grad forward per
environment step) shows only as "the script's own code" in a long step. A profiling timer
(setitimer ITIMER_PROF, SIGPROF) fires every INTERVAL_S of the process's CPU time; Python runs
the handler in the main thread at its next bytecode, with the frame it is executing, and the
handler counts the innermost frame that is the user's code, with the step it fell in and the
wall time since the previous tick. analyze/loop_account.py names the function and lines of
the long steps.

Why a signal and not a thread reading sys._current_frames(): a thread gets the GIL when the
main thread lets go of it, which is inside torch's C++ calls, so it sees the line that calls
torch far more often than a pure-Python simulator that holds the GIL (measured here: a
rollout whose simulator took 2.4 s of 2.9 s got 28% of a thread sampler's samples). Each
sample is weighted by the main thread's CPU time since the one before (time.thread_time):
the process timer also counts torch's intra-op threads, which tick it faster during torch
calls, and wall time would charge the waits of a loaded machine to whatever line comes next.

Safe to leave in a script: installed only from the main thread when nothing else handles
SIGPROF; system calls it interrupts are restarted (siginterrupt False); forked DataLoader
workers inherit no timer. Cost: one handler call per 10 ms of CPU, tens of microseconds.
Baseline runs with a profiler window only; variants do not sample.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from types import FrameType
from typing import Any

from perfdoctor.analyze.frames import UserCode

log = logging.getLogger(__name__)

# 10 ms of CPU: py-spy's default rate; a 50 ms rollout gets ~5 samples, a handful of
# rollouts enough to name the function that fills them.
INTERVAL_S = 0.01
# Distinct (step, file, function, line) rows kept: a long --run-to-end run stops adding rows
# here and says how many samples it dropped.
MAX_ROWS = 4000
# Frames walked outward from the innermost one before giving up on finding the user's.
MAX_DEPTH = 200


class StackSampler:
    def __init__(self, user_code: UserCode) -> None:
        self._user_code = user_code
        self._counts: Counter[tuple[int, str, str, int, int]] = Counter()
        self._ms: dict[tuple[int, str, str, int, int], float] = {}
        self._dropped = 0
        self._samples = 0
        self._step: int | None = None
        self._last = 0.0
        self._previous: Any = None
        self.running = False
        self.why_not: str | None = None

    def step_started(self, index: int) -> None:
        self._step = index

    def start(self) -> None:
        if self.running:
            return
        sigprof = getattr(signal, "SIGPROF", None)
        if sigprof is None or not hasattr(signal, "setitimer"):
            self.why_not = "no SIGPROF/setitimer on this platform"
            return
        if threading.current_thread() is not threading.main_thread():
            self.why_not = "the probes were installed outside the main thread"
            return
        current = signal.getsignal(sigprof)
        if current not in (signal.SIG_DFL, None):
            self.why_not = "the script (or a library) handles SIGPROF itself"
            return
        try:
            self._previous = signal.signal(sigprof, self._on_tick)
            signal.siginterrupt(sigprof, False)
            self._last = time.thread_time()
            signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)
        except (OSError, ValueError) as exc:
            self.why_not = f"could not start the profiling timer: {exc}"
            log.debug("stack sampler not started", exc_info=True)
            return
        self.running = True

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        try:
            signal.setitimer(signal.ITIMER_PROF, 0.0, 0.0)
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGPROF, self._previous or signal.SIG_DFL)
        except (OSError, ValueError):
            log.debug("stack sampler stop failed", exc_info=True)

    def _on_tick(self, _signum: int, frame: FrameType | None) -> None:
        now = time.thread_time()  # the handler runs in the main thread: its CPU time
        waited_ms, self._last = (now - self._last) * 1000.0, now
        step = self._step
        if step is None or not self.running:
            return
        self._samples += 1
        try:
            key = self._innermost_user(frame)
        except Exception:  # a signal handler must never raise into the user's script
            log.debug("stack sample failed", exc_info=True)
            return
        if key is None:
            return
        row = (step, *key)
        if row in self._counts or len(self._counts) < MAX_ROWS:
            self._counts[row] += 1
            self._ms[row] = self._ms.get(row, 0.0) + waited_ms
        else:
            self._dropped += 1

    def _innermost_user(self, frame: FrameType | None) -> tuple[str, str, int, int] | None:
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            # f_lineno is None while a frame sits between lines (a compiled region's
            # resume point, a generator's setup): skip to its caller.
            if frame.f_lineno is not None and self._user_code.is_user_file(code.co_filename):
                loc = self._user_code.location(code.co_filename, frame.f_lineno, code.co_name)
                return (str(loc["file"]), code.co_name, code.co_firstlineno, frame.f_lineno)
            frame = frame.f_back
            depth += 1
        return None

    def summary(self) -> dict[str, Any] | None:
        """observations.json "step_stacks" (docs/run-directory.md); None when it never ran."""
        if not self._samples and self.why_not is None:
            return None
        return {
            "interval_ms": INTERVAL_S * 1000.0,
            "samples": self._samples,
            "dropped": self._dropped,
            "not_sampled": self.why_not,
            # [step, file, function, first line of the function, line, samples, main-thread CPU ms]
            "rows": [
                [*key, n, round(self._ms.get(key, 0.0), 3)]
                for key, n in sorted(self._counts.items())
            ],
        }
