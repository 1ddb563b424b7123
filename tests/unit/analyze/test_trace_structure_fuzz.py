"""2,000 structural mutants of a small real trace (seeded): nesting up to thousands of levels
deep, values of the wrong kind, keys dropped, events duplicated or truncated. Every one
parses or raises CorruptArtifact with one line; nothing else, and all of it in seconds."""

from __future__ import annotations

import copy
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.errors import CorruptArtifact

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20261127
MUTANTS = 2000


def _nest(value: Any, depth: int, rng: random.Random) -> Any:
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def _mutant(base: str, rng: random.Random) -> bytes:
    doc = json.loads(base)  # a fresh copy, several times faster than copy.deepcopy
    events = doc["traceEvents"]
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        ev = rng.choice(events) if events else {}
        ev = ev if isinstance(ev, dict) else {}
        key = rng.choice(["name", "ph", "ts", "dur", "args", "cat", "pid", "tid", "id"])
        if op == 0:
            ev[key] = _nest(ev.get(key), rng.choice([1, 3, 40, 120]), rng)
        elif op == 1:
            ev.setdefault("args", {})
            if isinstance(ev["args"], dict):
                ev["args"][rng.choice(["External id", "Input Dims", "x"])] = _nest(
                    1, rng.choice([5, 60, 150]), rng
                )
        elif op == 2:
            ev.pop(key, None)
        elif op == 3:
            events.insert(rng.randrange(len(events) + 1), copy.deepcopy(ev))
        elif op == 4 and events:
            events[rng.randrange(len(events))] = rng.choice([None, 1, "x", [], {}, [{}]])
        elif op == 5:
            doc[rng.choice(["deviceProperties", "distributedInfo", "traceEvents", "extra"])] = (
                _nest({}, rng.choice([1, 10, 150]), rng)
            )
        elif op == 6:
            ev[key] = rng.choice([None, True, -1, 2**64, 1e308, "", [], {}])
        else:
            rng.shuffle(events)
    text = json.dumps(doc)
    if rng.random() < 0.25:
        # Deeper than any decoder's limit, as raw text (json.dumps would itself overflow).
        depth = rng.choice([999, 1000, 1500, 5000])
        spot = text.index("[") + 1
        text = text[:spot] + '{"args": {"x": ' + _deep_text(depth) + "}}, " + text[spot:]
    if rng.random() < 0.1:
        text = text[: rng.randrange(len(text))]
    return text.encode()


def test_structural_mutants_parse_or_are_corrupt(tmp_path: Path) -> None:
    base = (FIXTURES / "cuda_two_steps.json").read_text()
    rng = random.Random(SEED)
    # In memory where there is a tmpfs: 2,000 writes to a busy disk cost seconds.
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    path = where / f"perfdoctor-fuzz-{os.getpid()}.json"
    try:
        _run(base, rng, path)
    finally:
        path.unlink(missing_ok=True)


def _run(base: str, rng: random.Random, path: Path) -> None:
    outcomes = {"parsed": 0, "corrupt": 0}
    start = time.monotonic()
    for i in range(MUTANTS):
        path.write_bytes(_mutant(base, rng))
        try:
            parse_trace(path)
        except CorruptArtifact as err:
            assert "\n" not in str(err), f"mutant {i}"
            outcomes["corrupt"] += 1
        except Exception as err:  # the point: name the failing mutant
            raise AssertionError(f"mutant {i}: {type(err).__name__}: {err}") from err
        else:
            outcomes["parsed"] += 1
    assert outcomes["parsed"] > 100 and outcomes["corrupt"] > 100, outcomes
    assert time.monotonic() - start < 60  # a hang, not a timing claim: about 3 s
