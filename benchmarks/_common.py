"""Shared helpers of the benchmark scripts: the machine, paired statistics, child processes.

Benchmarks print figures measured side by side in one run; they never assert. Every
measurement that must not share a process with another one (peak RSS, a fresh import of
torch) runs in its own subprocess, whose own resource usage is read with os.wait4.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks run from a checkout whether or not perfdoctor is installed.
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))
SAMPLE_MODELS = ROOT / "sample_models"
# Big enough that the sample models never log during a measured run.
QUIET_LOG_EVERY = "1000000"


def out(line: str = "") -> None:
    """Benchmarks report on stdout; that is their whole output."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_version(python: str = sys.executable) -> str:
    """Asked of a subprocess, so the benchmark process itself never imports torch."""
    proc = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "not installed"


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {cpu_model()}, {os.cpu_count()} logical cores, Python "
        f"{platform.python_version()}, torch {torch_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {load}"
    )


def sample_models() -> list[Path]:
    return sorted(p for p in SAMPLE_MODELS.glob("*.py") if not p.name.startswith("_"))


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Spread:
    """Median and the range of a handful of paired values (too few for a quantile)."""

    median: float
    low: float
    high: float
    n: int

    def fmt(self, digits: int = 3, unit: str = "") -> str:
        d = digits
        return f"{self.median:.{d}f}{unit} [{self.low:.{d}f}-{self.high:.{d}f}, n={self.n}]"


def spread(values: Sequence[float]) -> Spread | None:
    vals = [v for v in values if v == v]
    if not vals:
        return None
    return Spread(statistics.median(vals), min(vals), max(vals), len(vals))


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_bytes: int
    stdout: str
    stderr: str


def run_child(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> ChildResult:
    """Run one command and return its own CPU time and peak RSS (not its children's).

    Output goes to temporary files, not pipes, so a chatty child never blocks on a full
    pipe while we wait for it in wait4.
    """
    import tempfile

    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=None if env is None else {**os.environ, **env},
            stdout=fout,
            stderr=ferr,
        )
        deadline = None if timeout_s is None else start + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        fout.seek(0)
        ferr.seek(0)
        return ChildResult(
            returncode=proc.returncode,
            wall_s=wall,
            user_s=usage.ru_utime,
            sys_s=usage.ru_stime,
            max_rss_bytes=usage.ru_maxrss * 1024,  # Linux reports KiB
            stdout=fout.read().decode(errors="replace"),
            stderr=ferr.read().decode(errors="replace"),
        )


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


# --------------------------------------------------------------------------- load


def uptime() -> str:
    """The `uptime` line: the load beside each figure on this shared machine."""
    proc = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    line = proc.stdout.strip()
    if line:
        return line
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


GAUGE_N = 20_000_000


def gauge() -> float:
    """The machine-speed gauge of the README: CPU seconds of a Python loop summing 20 M
    integers, in a fresh process (higher is a slower machine; 1.3-2.0 s on the reference
    2-core guest)."""
    code = (
        "import time\nt = time.process_time()\ns = 0\n"
        f"for i in range({GAUGE_N}):\n    s += i\nprint(time.process_time() - t)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    try:
        return float(proc.stdout.strip())
    except ValueError:
        return float("nan")


def conditions() -> str:
    """One line for the start and the end of a benchmark: load and the gauge."""
    return f"{uptime()} | gauge {gauge():.2f} s"


class Burner:
    """One CPU burner (`python -c "while True: pass"`) taking one core while it lives.

    A context manager: it is killed on the way out, also on Ctrl-C or an exception; SIGTERM
    is turned into KeyboardInterrupt for the duration, so `kill` of the benchmark ends it too.

    It runs in a session of its own, as another terminal's or another user's work does. On a
    kernel with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by
    default in most distributions) the CPU is shared fairly between sessions first, and
    perfdoctor's child runs in a session of its own (collect/launcher.py): a burner in the
    benchmark's own session would compete with the plain runs thread by thread but with
    perfdoctor's child session by session. Measured (one busy core, the single_tensor_opt
    model at 2 intra-op threads): a plain run in the burner's session steps in 9-14 ms, the
    same run under `setsid` settles into ~944 ms steps, the two threads stalling each other
    on the one core their session gets.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.proc: subprocess.Popen[bytes] | None = None
        self._old_term: object = None

    def __enter__(self) -> Burner:
        if not self.enabled:
            return self
        import signal

        def _term(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        self._old_term = signal.signal(signal.SIGTERM, _term)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"], start_new_session=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            import signal

            self.proc.kill()
            self.proc.wait()
            self.proc = None
            signal.signal(signal.SIGTERM, self._old_term)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        return "one CPU burner" if self.enabled else "no burner"
