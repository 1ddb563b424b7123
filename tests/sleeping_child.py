"""A child process that idles until killed: a descendant for the samplers and the process
tree to find, started only once it runs (it says so on stdout)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sleeping_child() -> Iterator[subprocess.Popen[bytes]]:
    """Yields the running child; kills and reaps it on leaving the block."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        yield child
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
