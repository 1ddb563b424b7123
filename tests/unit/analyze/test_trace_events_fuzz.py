"""Bounded fuzzing of the trace parser and the trace analysis: whatever the bytes, the
outcome is a summary or CorruptArtifact (exit 68, one line), never another exception.

Small real-format traces (current kineto, 2021-era, ROCm names) are mutated with a fixed
seed: byte flips, truncation, values of the wrong type, huge / negative / non-finite
numbers, random nesting, dropped keys, shuffled events. Each case is parsed whole and in
small chunks (the streaming path), then summarised.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.trace import summarize_trace
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.errors import CorruptArtifact

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 20261123
CASES = 300

_ODD_VALUES: list[Any] = [
    None,
    True,
    "",
    "x",
    "\u0000\ud7ff",
    [],
    {},
    [[[]]],
    {"a": {"b": [1, {"c": None}]}},
    0,
    -1,
    2**63,
    -(2**63) - 1,
    10**30,
    -(10**30),
    1e308,
    -1e308,
    5e-324,
    0.5,
    -0.0,
]


def _bases() -> list[dict[str, Any]]:
    current = json.loads((FIXTURES / "cuda_two_steps.json").read_text())
    array_form = {"traceEvents": json.loads((FIXTURES / "cpu_array_form.json").read_text())}
    old = copy.deepcopy(current)
    renames = {
        "cpu_op": "Operator",
        "kernel": "Kernel",
        "cuda_runtime": "Runtime",
        "gpu_memcpy": "Memcpy",
        "user_annotation": "Operator",
        "python_function": "Python function",
    }
    for ev in old["traceEvents"]:
        ev["cat"] = renames.get(ev.get("cat"), ev.get("cat"))
        if str(ev.get("name", "")).startswith("cuda"):
            ev["name"] = "hip" + ev["name"][4:]
    old["computeProperties"] = old.pop("deviceProperties", [{"name": "AMD", "major": 9}])
    # GPU activity whose launch calls were not recorded.
    gpu_only = {
        "traceEvents": [
            e for e in current["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cpu_op")
        ]
    }
    return [current, array_form, old, gpu_only]


def _random_path(doc: Any, rng: random.Random) -> tuple[Any, Any] | None:
    """A random (container, key) inside doc."""
    node, key = None, None
    cur = doc
    for _ in range(rng.randint(1, 5)):
        if isinstance(cur, dict) and cur:
            key = rng.choice(list(cur))
        elif isinstance(cur, list) and cur:
            key = rng.randrange(len(cur))
        else:
            break
        node, cur = cur, cur[key]
    return None if node is None else (node, key)


def _mutate_structure(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        where = _random_path(doc, rng)
        if where is None:
            continue
        node, key = where
        op = rng.random()
        if op < 0.5:
            node[key] = rng.choice(_ODD_VALUES)
        elif op < 0.65:
            node[key] = [node[key]] if rng.random() < 0.5 else {"k": node[key]}
        elif op < 0.8 and isinstance(node, dict):
            del node[key]
        elif isinstance(node, list):
            rng.shuffle(node)
        else:
            node[key] = json.loads("[" * 40 + "]" * 40)
    return doc


_NUMBERS: list[Any] = [0, -1, 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 1e308, -1e308]
_FIELDS = ("ts", "dur", "pid", "tid", "name", "cat", "ph")
_ARGS = ("External id", "correlation", "Python id", "Python parent id", "bytes", "device", "stream")


def _mutate_fields(doc: Any, rng: random.Random) -> Any:
    """Values that still decode but make no sense: the analysis must cope with them."""
    doc = copy.deepcopy(doc)
    events = doc["traceEvents"]
    for _ in range(rng.randint(1, 12)):
        ev = rng.choice(events)
        if rng.random() < 0.5:
            key = rng.choice(_FIELDS)
            if key in ("name", "cat", "ph"):
                other = rng.choice(events)
                ev[key] = other.get(key, "")
            else:
                ev[key] = (
                    rng.choice(_NUMBERS)
                    if key not in ("pid", "tid")
                    else rng.choice([*_NUMBERS[:4], "stream 7", "Spans"])
                )
        else:
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(_ARGS)] = rng.choice([*_NUMBERS, "7", None, 0.5])
    return doc


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    op = rng.random()
    if op < 0.4:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif op < 0.6:
        del buf[rng.randrange(len(buf)) :]
    elif op < 0.8:
        pos = rng.randrange(len(buf))
        token = rng.choice([b"NaN", b"-Infinity", b"1e999", b"-99999999999999999999999", b"\xff"])
        buf[pos:pos] = token
    else:
        start = rng.randrange(len(buf))
        buf[start : start + rng.randint(1, 64)] = b""
    return bytes(buf)


def _case(rng: random.Random, bases: list[dict[str, Any]]) -> tuple[bytes, bool]:
    doc = rng.choice(bases)
    if rng.random() < 0.6:
        doc = _mutate_fields(doc, rng)
    if rng.random() < 0.3:
        doc = _mutate_structure(doc, rng)
    indent = rng.choice([None, 1])
    data = json.dumps(doc, indent=indent).encode()
    if rng.random() < 0.3:
        data = _mutate_bytes(data, rng)
    packed = rng.random() < 0.2
    if packed:
        data = gzip.compress(data)
        if rng.random() < 0.3:
            data = _mutate_bytes(data, rng)
    return data, packed


def _analyse(path: Path, chunk: int | None) -> None:
    try:
        events = parse_trace(path, chunk_bytes=chunk)
        if chunk is None:  # the streamed parse gives the same tables (test_trace_events_formats)
            summarize_trace(events)
    except CorruptArtifact as err:
        assert "\n" not in str(err)


@pytest.mark.parametrize("block", range(6))
def test_mutated_traces_end_in_a_summary_or_corrupt_artifact(tmp_path: Path, block: int) -> None:
    rng = random.Random(SEED + block)
    bases = _bases()
    for i in range(CASES // 6):
        data, packed = _case(rng, bases)
        path = tmp_path / f"case{i}.json{'.gz' if packed else ''}"
        path.write_bytes(data)
        for chunk in (None, 512):
            try:
                _analyse(path, chunk)
            except Exception as err:  # the point: name the failing case
                raise AssertionError(
                    f"block {block} case {i} chunk {chunk}: {type(err).__name__}: {err}"
                ) from err
