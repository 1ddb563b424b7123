"""Python callbacks on gloo's threads while torch's profiler (with Python stacks) starts and
stops: how often the process dies, with and without perfdoctor keeping those threads' Python
states alive (perfdoctor/collect/thread_state.py).

Each run is two gloo ranks under `torchrun --standalone`; each rank starts and stops the
profiler CYCLES times, launching 16 async all-reduces inside the window whose Python
done-callbacks are left to run into the next start (the worst case: DDP waits for its buckets).

    python3 benchmarks/gloo_callbacks_profiler.py --pairs 8 --cycles 1000

prints, per pair, whether the run without and the run with the kept states crashed (the two
alternate), then the totals.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from _common import machine_line

RANK_MAIN = "rank"


def rank(cycles: int, keep: bool) -> None:
    import torch
    import torch.distributed as dist

    from perfdoctor.collect.thread_state import keep_this_threads_state

    dist.init_process_group("gloo")
    tensors = [torch.randn(20000) for _ in range(16)]

    def callback(fut: torch.futures.Future[object]) -> None:
        if keep:
            keep_this_threads_state()
        fut.value()

    futures: list[torch.futures.Future[object]] = []
    for _ in range(cycles):
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True
        )
        prof.start()
        futures = [dist.all_reduce(t, async_op=True).get_future() for t in tensors]
        for fut in futures:
            fut.add_done_callback(callback)
        torch.randn(100, 100) @ torch.randn(100, 100)
        prof.stop()
    torch.futures.wait_all(futures)
    dist.barrier()
    dist.destroy_process_group()


def crashed(cycles: int, keep: bool) -> bool:
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *(__file__, RANK_MAIN, str(cycles), "1" if keep else "0"),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return run.returncode != 0


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == RANK_MAIN:
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
        rank(int(sys.argv[2]), sys.argv[3] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    totals = {False: 0, True: 0}
    for pair in range(args.pairs):
        row = []
        for keep in (False, True):
            bad = crashed(args.cycles, keep)
            totals[keep] += bad
            row.append(f"{'kept' if keep else 'plain'}: {'CRASH' if bad else 'ok'}")
        print(f"pair {pair + 1}: " + ", ".join(row), flush=True)
    print(
        f"crashed without kept states: {totals[False]} of {args.pairs}; "
        f"with: {totals[True]} of {args.pairs}"
    )


if __name__ == "__main__":
    main()
