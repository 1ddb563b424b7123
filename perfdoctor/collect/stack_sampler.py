"""Which of the user's lines the main thread is running, sampled per step.

The step hooks time what happens between optimizer steps but cannot say where: a
policy-gradient loop's rollout (a simulator in plain Python plus a no_grad forward per
environment step) shows only as "the script's own code" in a long step. A daemon thread
reads the main thread's stack every INTERVAL_S (sys._current_frames, no tracing, nothing
installed in the script) and counts the innermost frame that is the user's code, with the
step it fell in; analyze/loop_account.py names the function and lines of the long steps.

Cost: one wake-up per INTERVAL_S that holds the GIL for a frame walk (tens of microseconds,
frames classified once per file by UserCode), under 1% of a core. Baseline runs with a
profiler window only; variants do not sample.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

from perfdoctor.analyze.frames import UserCode

# 10 ms: py-spy's default rate; a 50 ms rollout gets ~5 samples, a handful of rollouts
# enough to name the function that fills them.
INTERVAL_S = 0.01
# Distinct (step, file, function, line) rows kept: a long --run-to-end run stops adding rows
# here and says how many samples it dropped.
MAX_ROWS = 4000
# Frames walked outward from the innermost one before giving up on finding the user's.
MAX_DEPTH = 200


class StackSampler:
    def __init__(self, user_code: UserCode) -> None:
        self._user_code = user_code
        self._main = threading.main_thread().ident
        self._counts: Counter[tuple[int, str, str, int, int]] = Counter()
        self._dropped = 0
        self._samples = 0
        self._step: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step_started(self, index: int) -> None:
        self._step = index

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="perfdoctor-stacks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            step = self._step
            if step is None:
                continue
            frame = sys._current_frames().get(self._main)
            key = self._innermost_user(frame)
            del frame
            self._samples += 1
            if key is None:
                continue
            row = (step, *key)
            if row in self._counts or len(self._counts) < MAX_ROWS:
                self._counts[row] += 1
            else:
                self._dropped += 1

    def _innermost_user(self, frame: Any) -> tuple[str, str, int, int] | None:
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            if self._user_code.is_user_file(code.co_filename):
                loc = self._user_code.location(code.co_filename, frame.f_lineno, code.co_name)
                return (str(loc["file"]), code.co_name, code.co_firstlineno, frame.f_lineno)
            frame = frame.f_back
            depth += 1
        return None

    def summary(self) -> dict[str, Any] | None:
        """observations.json "step_stacks" (docs/run-directory.md); None before any sample."""
        if not self._samples:
            return None
        return {
            "interval_ms": INTERVAL_S * 1000.0,
            "samples": self._samples,
            "dropped": self._dropped,
            # [step, file, function, first line of the function, line, samples]
            "rows": [[*key, n] for key, n in sorted(self._counts.items())],
        }
