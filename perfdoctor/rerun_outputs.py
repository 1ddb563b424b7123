"""What perfdoctor's own re-runs leave in the script's output folders, and removing it.

Every child run is the user's script, run in the user's working directory: a Lightning
script makes `lightning_logs/version_N` per run, a SummaryWriter `runs/<date>_<host>`, Hydra
`outputs/<date>/<time>`, wandb `wandb/run-<date>-<id>`, MLflow `mlruns/<exp>/<run id>`. A
session of ten runs would leave ten such folders beside the user's own. The first baseline
run is the user's run, as `python train.py` would have made it: its outputs stay. For every
later run (baseline repeats, variants), the entries of the known framework log folders are
listed before the run, and what appeared during it is removed afterwards and named in
session.json and the report.

Only those folders (at the top of the working directory or one level down, as
`out/lightning_logs`), and only entries that did not exist before the run, are touched:
the script's own files elsewhere (a checkpoint it writes to a path of its choosing) are
never removed. Entries are compared by name down to two levels below a log folder (Hydra's
`<date>/<time>`, MLflow's `<experiment>/<run>`): a new folder goes whole, and in an existing
one (a logger with a fixed `version=0`) only the files the re-run added go.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# Folders frameworks create one entry per run in, by default:
#   lightning_logs  Lightning's TensorBoard/CSV loggers: version_N
#   runs            torch.utils.tensorboard.SummaryWriter(): <date>_<host>; HF Trainer's
#                   logging_dir (<output_dir>/runs/<date>_<host>) before transformers 5
#   outputs, multirun  Hydra: <date>/<time>
#   wandb           Weights & Biases: run-<date>-<id> (and offline-run-...)
#   mlruns          MLflow: <experiment id>/<run id>
OUTPUT_FOLDERS = ("lightning_logs", "runs", "outputs", "multirun", "wandb", "mlruns")
# Entries are compared down to this many levels below each folder (Hydra's <date>/<time>
# and MLflow's <experiment>/<run> are two deep).
DEPTH = 2

Snapshot = frozenset[str]


def output_folders(cwd: Path, exclude: Iterable[Path] = ()) -> list[Path]:
    """The known output folders under `cwd` and one level below it, except `exclude`
    (perfdoctor's own runs folder, which may well be called `runs`)."""
    excluded = {_resolved(p) for p in exclude}
    found: list[Path] = []
    candidates = [cwd / name for name in OUTPUT_FOLDERS]
    try:
        children = [c for c in cwd.iterdir() if c.is_dir() and not c.is_symlink()]
    except OSError:
        children = []
    for child in children:
        candidates += [child / name for name in OUTPUT_FOLDERS]
    for path in candidates:
        resolved = _resolved(path)
        inside_excluded = any(_inside(resolved, ex) for ex in excluded)
        if path.is_dir() and not path.is_symlink() and not inside_excluded:
            found.append(path)
    return found


def snapshot(cwd: Path, exclude: Iterable[Path] = ()) -> Snapshot:
    """Every entry of the output folders, as paths relative to `cwd`; the folders too."""
    entries: set[str] = set()
    for folder in output_folders(cwd, exclude):
        entries.add(os.path.relpath(folder, cwd))
        entries.update(_entries(folder, cwd, DEPTH))
    return frozenset(entries)


def created_since(before: Snapshot, after: Snapshot) -> list[str]:
    """The entries of `after` not in `before`, shallowest only: a new folder is removed
    whole, not entry by entry."""
    new = sorted(after - before)
    top: list[str] = []
    for path in new:
        if not any(path.startswith(kept + os.sep) for kept in top):
            top.append(path)
    return top


def remove(cwd: Path, relative: Iterable[str]) -> list[str]:
    """Remove these entries under `cwd`; returns those removed (a failure is logged)."""
    removed = []
    root = _resolved(cwd)
    for rel in relative:
        path = cwd / rel
        if root not in _resolved(path).parents:
            continue  # never outside the working directory, whatever a name resolves to
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(rel)
        except OSError as err:
            log.warning("could not remove %s left by a re-run: %s", path, err)
    return removed


def _entries(folder: Path, cwd: Path, depth: int) -> list[str]:
    out: list[str] = []
    try:
        children = list(folder.iterdir())
    except OSError:
        return out
    for child in children:
        out.append(os.path.relpath(child, cwd))
        if depth > 1 and child.is_dir() and not child.is_symlink():
            out += _entries(child, cwd, depth - 1)
    return out


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
