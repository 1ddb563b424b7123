"""CPU time of one tick of perfdoctor's CPU sampler (collect/cpu_sampler.py) at 10 Hz, with the
machine's usual processes and with EXTRA more sleeping ones: finding the child's descendants
reads every process on the machine, so its cost grows with them.

    python3 benchmarks/cpu_sampler_tick.py --extra 1000
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys

from _common import machine_line

from perfdoctor.collect.cpu_sampler import CpuSampler

TICKS = 100
PERIOD_S = 0.1  # the sampling thread's period (collect/sampling.py DEFAULT_PERIOD_S)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ms_per_tick(child_pid: int) -> float:
    now = [0.0]
    sampler = CpuSampler(child_pid, clock=lambda: now[0])
    sampler.start()
    start = cpu_s()
    for tick in range(TICKS):
        now[0] = tick * PERIOD_S
        sampler.sample()
    return (cpu_s() - start) / TICKS * 1000.0


def processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, default=1000)
    args = parser.parse_args()
    print(machine_line())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    extra: list[subprocess.Popen[bytes]] = []
    try:
        print(f"{processes()} processes: {ms_per_tick(child.pid):.2f} ms of CPU a tick")
        extra = [subprocess.Popen(["sleep", "600"]) for _ in range(args.extra)]
        print(f"{processes()} processes: {ms_per_tick(child.pid):.2f} ms of CPU a tick")
    finally:
        for proc in [child, *extra]:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
