"""Mutants of real GPU traces for the whole diagnosis, not just the parser (issue 31): hostile
collective fields, extreme numbers, quotes, bidi and escape characters in names, impossible
device properties and shapes. Each mutant must give a report or CorruptArtifact (68) in one
line: anything else is a crash. Used by test_corpus_fuzz.py (a few dozen mutants) and by
`python -m tests.unit.analyze.corpus_fuzz N` for a long run."""

from __future__ import annotations

import gzip
import json
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.errors import CorruptArtifact
from perfdoctor.render.html import render_html
from perfdoctor.render.json_report import report_to_dict
from perfdoctor.render.markdown import render_markdown

# Traces up to this size decompressed take part: a mutant is diagnosed in well under a second.
MAX_TRACE_BYTES = 2 << 20

HOSTILE_NUMBERS: list[Any] = [
    0, -1, -8, 1e308, -1e308, 1e-300, 10**30, 2**64, 2**63 - 1, 0.5, "²", "1e308", "", None,
    True, [], {}, "NaN",
]  # fmt: skip
HOSTILE_TEXT = ['"', '\\"', "\u202e", "\u2066x\u2069", "\x1b[31m", "[bold]", "\x00", "<script>"]
COMM_KEYS = ["In msg nelems", "Out msg nelems", "Group size", "dtype", "Collective name"]
DEVICE_KEYS = ["computeMajor", "computeMinor", "totalGlobalMem", "numSms", "warpSize", "id"]


def _events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]


def _pick(events: list[dict[str, Any]], rng: random.Random, pred: Callable[[dict], bool]) -> Any:
    found = [e for e in events if pred(e)]
    return rng.choice(found) if found else (rng.choice(events) if events else {})


def _hostile_comm(doc: dict[str, Any], rng: random.Random) -> None:
    events = _events(doc)
    ev = _pick(
        events,
        rng,
        lambda e: "nccl" in str(e.get("name", "")).lower() or "Group size" in (e.get("args") or {}),
    )
    args = ev.setdefault("args", {})
    if isinstance(args, dict):
        args[rng.choice(COMM_KEYS)] = rng.choice(HOSTILE_NUMBERS)


def _extreme_number(doc: dict[str, Any], rng: random.Random) -> None:
    ev = _pick(_events(doc), rng, lambda e: True)
    ev[rng.choice(["ts", "dur", "pid", "tid"])] = rng.choice(HOSTILE_NUMBERS)


def _step_zero(doc: dict[str, Any], rng: random.Random) -> None:
    for ev in _events(doc):
        if str(ev.get("name", "")).startswith("ProfilerStep#"):
            ev["dur"] = rng.choice([0, -1, 1e308])


def _hostile_name(doc: dict[str, Any], rng: random.Random) -> None:
    ev = _pick(_events(doc), rng, lambda e: True)
    name = str(ev.get("name", ""))
    cut = rng.randrange(len(name) + 1)
    ev["name"] = name[:cut] + rng.choice(HOSTILE_TEXT) + name[cut:]
    args = ev.get("args")
    if isinstance(args, dict) and rng.random() < 0.3:
        args["Python id"] = rng.choice(HOSTILE_TEXT)
        args["File"] = "/tmp/" + rng.choice(HOSTILE_TEXT) + ".py"


def _hostile_device(doc: dict[str, Any], rng: random.Random) -> None:
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        props[0][rng.choice(DEVICE_KEYS)] = rng.choice(HOSTILE_NUMBERS)
    else:
        doc["distributedInfo"] = {
            "rank": rng.choice(HOSTILE_NUMBERS),
            "world_size": rng.choice(HOSTILE_NUMBERS),
        }


def _hostile_shapes(doc: dict[str, Any], rng: random.Random) -> None:
    ev = _pick(_events(doc), rng, lambda e: "Input Dims" in (e.get("args") or {}))
    args = ev.setdefault("args", {})
    if isinstance(args, dict):
        big = rng.choice([10**12, -1, 2**62, 0, 10**30])
        args["Input Dims"] = rng.choice([[[big, big], [big, big]], [[big]], [[1, big]], "²", [[]]])


MUTATIONS = [
    _hostile_comm,
    _extreme_number,
    _step_zero,
    _hostile_name,
    _hostile_device,
    _hostile_shapes,
]


def mutant(base: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    doc = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 4)):
        rng.choice(MUTATIONS)(doc, rng)
    return doc


def small_traces(traces: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in traces:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        if len(text) <= MAX_TRACE_BYTES:
            doc = json.loads(text)
            if isinstance(doc, dict):
                out.append((path, doc))
    return out


def check_one(doc: dict[str, Any], where: Path) -> str:
    """'report' or 'corrupt'; raises AssertionError naming anything else."""
    path = where / "in" / "m.pt.trace.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, ensure_ascii=False, allow_nan=False, default=str)
    path.write_bytes(gzip.compress(text.encode("utf-8", "surrogatepass"), compresslevel=1))
    try:
        (done,) = diagnose_traces([path], where / "out")
    except CorruptArtifact as err:
        assert "\n" not in str(err), str(err)
        return "corrupt"
    if done.report is None:
        assert isinstance(done.error, CorruptArtifact), done.error
        return "corrupt"
    report_to_dict(done.report)
    render_markdown(done.report)
    html = render_html(done.report)
    assert "\u202e" not in html and "\x1b" not in html, "raw control characters in HTML"
    return "report"


def run(traces: list[Path], count: int, seed: int, progress: bool = False) -> dict[str, Any]:
    bases = small_traces(traces)
    rng = random.Random(seed)
    outcomes: dict[str, Any] = {"report": 0, "corrupt": 0, "crash": []}
    with tempfile.TemporaryDirectory(prefix="perfdoctor-fuzz-") as tmp:
        for i in range(count):
            path, base = rng.choice(bases)
            doc = mutant(base, rng)
            try:
                outcomes[check_one(doc, Path(tmp))] += 1
            except Exception as err:  # the point: count and name the crash
                outcomes["crash"].append(f"mutant {i} of {path.name}: {type(err).__name__}: {err}")
            if progress and (i + 1) % 50 == 0:
                print(
                    f"{i + 1}: {outcomes['report']} reports, {outcomes['corrupt']} corrupt, "
                    f"{len(outcomes['crash'])} crashes",
                    file=sys.stderr,
                    flush=True,
                )
    return outcomes


if __name__ == "__main__":
    from tests.unit.analyze.gpu_corpus import corpus_traces

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 31
    found = run(corpus_traces(), count, seed, True)
    print(json.dumps({**found, "crashes": len(found["crash"])}, indent=1))
