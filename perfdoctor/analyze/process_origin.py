"""How the training processes of a run came to be, in words: torchrun ranks, workers of
torch.multiprocessing with a process group, Hogwild trainers (no process group, one model in
shared memory), or processes the script started itself. Also which process may lead a run.

Pure: reads the `process` entries of processes.json / observations.json (collect/process_tree.py
`describe`), so both the parent that settles the records (collect/tree_settle.py) and the
analysis use the same words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# What a process's step detection says about it: optimizer or backward steps are training;
# time windows are forwards with no optimizer step and no backward (evaluation, a test loop).
TRAINING_DETECTIONS = ("optimizer", "backward")
_STARTING = "perfdoctor-child"
_MP_PREFIX = "multiprocessing-"


def trains(step_detection: object) -> bool:
    """A process whose steps are optimizer or backward steps trains; one whose steps are time
    windows (or unknown) does not, as far as the steps tell."""
    return step_detection in TRAINING_DETECTIONS


def origin(entries: Sequence[Mapping[str, Any]]) -> str | None:
    """'2 Hogwild trainers started with torch.multiprocessing (spawn): no process group, one
    model in shared memory' for the started processes among `entries`; None without any."""
    started = [e for e in entries if e.get("kind") not in (None, _STARTING)]
    if not started:
        return None
    kinds = sorted({str(e.get("kind")) for e in started})
    count = len(started)
    grouped = any(e.get("rank") is not None for e in started)  # a rank: a process group
    if kinds == ["torchrun"]:
        return f"{count} rank(s) started by torchrun"
    if all(k.startswith(_MP_PREFIX) for k in kinds):
        methods = ", ".join(k[len(_MP_PREFIX) :] for k in kinds)
        how = f"started with (torch.)multiprocessing ({methods})"
        if grouped:
            return f"{count} worker(s) {how}, with a process group (torch.distributed)"
        shared = [e.get("shared_model") for e in started]
        if any(s is True for s in shared):
            return (
                f"{count} Hogwild trainer(s) {how}: no process group, one model in shared "
                "memory updated by all of them"
            )
        return f"{count} trainer(s) {how}, with no process group: each trained on its own"
    if kinds == ["subprocess"]:
        return f"{count} process(es) the script started itself (subprocess)"
    return f"{count} process(es) started in several ways ({', '.join(kinds)})"
