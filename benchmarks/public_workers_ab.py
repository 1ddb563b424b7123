"""num_workers A/B on the public scripts whose headline was `input-bound` (issue 24).

makemore (transformer, rnn, mlp, bow) and minGPT (adder, chargpt) build their DataLoader
with 4 workers by default, on this 2-core machine, with a `__getitem__` of a few tensor ops.
Each script is extracted at its pinned commit (as public_scripts.py does) and a copy of its
training loop is edited to time every step, and inside it the `next()` of the loader; nothing
else changes. Variants, run alternately (A B C D A B C D ...), each in its own process:

    w4      num_workers=4 (the scripts' default)
    w1      num_workers=1
    w0      num_workers=0 (in-process loading)
    w0-memo num_workers=0 with the Dataset's __getitem__ memoised (each item built once):
            what a cheaper __getitem__ would buy, the other advice of input-bound

Per run: the median step and the median loader wait over the steps after the first
`--skip` (start-up, minGPT's evaluation at iteration 0, makemore's samples). The table gives
the median over the runs of each variant, and the load average when each run started.

    python benchmarks/public_workers_ab.py --mirror DIR [--rounds 3] [--only makemore/rnn]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import machine_line, out
from public_scripts import MAKEMORE, MINGPT, extract, names_file, text_file

RESULT_TAG = "PD_WORKERS_AB "


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"{where}: expected one {old!r} at the pinned commit")
    return text.replace(old, new)


_REPORT = (
    "import json as _pdj, statistics as _pds\n"
    "def _pd_report(rows, skip):\n"
    "    rows = rows[skip:]\n"
    f"    print({RESULT_TAG!r} + _pdj.dumps({{'steps': len(rows),"
    " 'step_ms': _pds.median(r[0] for r in rows) * 1e3,"
    " 'wait_ms': _pds.median(r[1] for r in rows) * 1e3,"
    " 'mean_step_ms': _pds.fmean(r[0] for r in rows) * 1e3}), flush=True)\n"
)

# Memoise __getitem__: every item built at the first call (in step 0, which is skipped),
# then returned from a list.
_MEMO = (
    "    def __getitem__(self, idx):\n"
    "        cache = self.__dict__.get('_pd_memo')\n"
    "        if cache is None:  # every item built once, at the first call\n"
    "            cache = self._pd_memo = [self._pd_getitem(i) for i in range(len(self))]\n"
    "        return cache[idx]\n\n"
    "    def _pd_getitem(self, idx):\n"
)


def _memoise(text: str, where: str) -> str:
    return _replace_once(text, "    def __getitem__(self, idx):\n", _MEMO, where)


def patch_makemore(tree: Path, memo: bool, skip: int) -> None:
    path = tree / "makemore.py"
    text = path.read_text()
    text = _replace_once(text, "import os\n", "import os\n" + _REPORT, "makemore.py")
    text = _replace_once(
        text,
        "        batch = batch_loader.next()\n",
        "        batch = batch_loader.next()\n        _pd_wait = time.time() - t0\n",
        "makemore.py",
    )
    text = _replace_once(
        text,
        "        t1 = time.time()\n",
        "        t1 = time.time()\n        _pd_rows.append((t1 - t0, _pd_wait))\n",
        "makemore.py",
    )
    text = _replace_once(text, "    step = 0\n", "    step = 0\n    _pd_rows = []\n", "makemore.py")
    text = _replace_once(
        text,
        "        if args.max_steps >= 0 and step >= args.max_steps:\n            break\n",
        "        if args.max_steps >= 0 and step >= args.max_steps:\n"
        f"            _pd_report(_pd_rows, {skip})\n            break\n",
        "makemore.py",
    )
    if memo:
        text = _memoise(text, "makemore.py")
    path.write_text(text)


def patch_mingpt(tree: Path, project: str, memo: bool, skip: int) -> None:
    path = tree / "mingpt" / "trainer.py"
    text = path.read_text()
    text = _replace_once(text, "import time\n", "import time\n" + _REPORT, "trainer.py")
    text = _replace_once(
        text,
        "        data_iter = iter(train_loader)\n        while True:\n",
        "        data_iter = iter(train_loader)\n        _pd_rows = []\n        while True:\n"
        "            _pd_t0 = time.perf_counter()\n",
        "trainer.py",
    )
    text = _replace_once(
        text,
        "            batch = [t.to(self.device) for t in batch]\n",
        "            _pd_wait = time.perf_counter() - _pd_t0\n"
        "            batch = [t.to(self.device) for t in batch]\n",
        "trainer.py",
    )
    # The step ends where minGPT's own iter_dt does, before its callbacks' logging.
    text = _replace_once(
        text,
        "            self.optimizer.step()\n",
        "            self.optimizer.step()\n"
        "            _pd_rows.append((time.perf_counter() - _pd_t0, _pd_wait))\n",
        "trainer.py",
    )
    text = _replace_once(
        text,
        "            if config.max_iters is not None and self.iter_num >= config.max_iters:\n"
        "                break\n",
        "            if config.max_iters is not None and self.iter_num >= config.max_iters:\n"
        f"                _pd_report(_pd_rows, {skip})\n                break\n",
        "trainer.py",
    )
    path.write_text(text)
    if memo:
        script = tree / project
        script.write_text(_memoise(script.read_text(), project))


@dataclass(frozen=True)
class Script:
    name: str
    repo: tuple[str, str]
    setup: Callable[[Path], None] | None
    patch: Callable[[Path, bool, int], None]
    cwd: str
    argv: Callable[[int, int], list[str]]  # (workers, steps) -> script + args
    pythonpath: str = ""


def _makemore(kind: str) -> Script:
    return Script(
        f"makemore/{kind}",
        MAKEMORE,
        names_file("names.txt"),
        patch_makemore,
        ".",
        lambda w, n: [
            "makemore.py",
            "-i",
            "names.txt",
            "--max-steps",
            str(n),
            "--type",
            kind,
            "--num-workers",
            str(w),
        ],
    )


SCRIPTS = (
    _makemore("rnn"),
    _makemore("mlp"),
    _makemore("bow"),
    Script(
        "mingpt/adder",
        MINGPT,
        None,
        lambda t, m, s: patch_mingpt(t, "projects/adder/adder.py", m, s),
        ".",
        lambda w, n: [
            "projects/adder/adder.py",
            f"--trainer.max_iters={n}",
            "--system.work_dir=out",
            f"--trainer.num_workers={w}",
        ],
        pythonpath=".",
    ),
    Script(
        "mingpt/chargpt",
        MINGPT,
        text_file("projects/chargpt/input.txt"),
        lambda t, m, s: patch_mingpt(t, "projects/chargpt/chargpt.py", m, s),
        "projects/chargpt",
        lambda w, n: [
            "chargpt.py",
            f"--trainer.max_iters={n}",
            "--system.work_dir=out",
            "--model.model_type=gpt-nano",
            "--data.block_size=64",
            "--trainer.batch_size=16",
            f"--trainer.num_workers={w}",
        ],
        pythonpath="../..",
    ),
    _makemore("transformer"),
)

VARIANTS = {"w4": (4, False), "w1": (1, False), "w0": (0, False), "w0-memo": (0, True)}


def prepare(script: Script, mirror: Path, root: Path, memo: bool, skip: int) -> Path:
    tree = root / ("memo" if memo else "plain")
    tree.mkdir()
    git_dir = mirror / script.repo[0].replace("/", "+") / "repo"
    extract(git_dir, script.repo[1], ("",), tree)
    if script.setup is not None:
        script.setup(tree)
    script.patch(tree, memo, skip)
    return tree


def run_once(script: Script, tree: Path, workers: int, steps: int) -> dict[str, float]:
    cwd = tree / script.cwd
    env = dict(os.environ)
    if script.pythonpath:
        env["PYTHONPATH"] = str((cwd / script.pythonpath).resolve())
    load = os.getloadavg()[0]
    proc = subprocess.run(
        [sys.executable, *script.argv(workers, steps)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            row = json.loads(line[len(RESULT_TAG) :])
            row["load"] = load
            return row
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    raise SystemExit(f"{script.name} w{workers}: no result (rc {proc.returncode}): {tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=30)
    parser.add_argument("--only", default="", help="script names, run in this order")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--jsonl", type=Path)
    args = parser.parse_args()
    only = {n for n in args.only.split(",") if n}
    variants = [v for v in args.variants.split(",") if v]
    out(machine_line())
    out("| script | variant | runs | step ms (median of runs) | loader wait ms | vs w4 | load |")
    out("|---|---|---|---|---|---|---|")
    by_name = {s.name: s for s in SCRIPTS}
    for script in [by_name[n] for n in args.only.split(",") if n] if only else SCRIPTS:
        with tempfile.TemporaryDirectory(prefix="pd-workers-ab-") as tmp:
            trees = {
                memo: prepare(script, args.mirror, Path(tmp), memo, args.skip)
                for memo in {VARIANTS[v][1] for v in variants}
            }
            rows: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for v in variants:
                    workers, memo = VARIANTS[v]
                    row = run_once(script, trees[memo], workers, args.steps)
                    rows[v].append(row)
                    if args.jsonl:
                        with open(args.jsonl, "a") as f:
                            f.write(json.dumps({"script": script.name, "variant": v, **row}) + "\n")
        base = statistics.median(r["step_ms"] for r in rows[variants[0]])
        for v in variants:
            step = statistics.median(r["step_ms"] for r in rows[v])
            wait = statistics.median(r["wait_ms"] for r in rows[v])
            loads = "-".join(f"{r['load']:.1f}" for r in rows[v])
            out(
                f"| {script.name} | {v} | {len(rows[v])} | {step:.2f} | {wait:.2f} | "
                f"{base / step:.2f}x | {loads} |"
            )


if __name__ == "__main__":
    main()
