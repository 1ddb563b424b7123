"""How the training processes came to be, in words (analyze/process_origin.py)."""

from __future__ import annotations

from perfdoctor.analyze.process_origin import origin, trains


def entry(kind: str, rank: int | None = None, shared: bool | None = None) -> dict[str, object]:
    return {"kind": kind, "rank": rank, "shared_model": shared}


def test_hogwild_trainers_are_named_as_such() -> None:
    text = origin([entry("multiprocessing-spawn", shared=True)] * 2)
    assert text is not None and text.startswith("2 Hogwild trainer(s)")
    assert "no process group" in text and "(spawn)" in text


def test_each_way_of_starting_has_its_words() -> None:
    assert origin([entry("torchrun", 0), entry("torchrun", 1)]) == "2 rank(s) started by torchrun"
    spawned = origin([entry("multiprocessing-spawn", 0), entry("multiprocessing-spawn", 1)])
    assert spawned is not None and "with a process group" in spawned
    alone = origin([entry("multiprocessing-fork", shared=False)])
    assert alone is not None and "each trained on its own" in alone
    assert origin([entry("subprocess")]) == "1 process(es) the script started itself (subprocess)"
    assert origin([{"kind": "perfdoctor-child"}]) is None


def test_only_optimizer_or_backward_steps_are_training() -> None:
    assert trains("optimizer") and trains("backward")
    assert not trains("time") and not trains(None)
