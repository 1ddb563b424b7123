"""Peak RSS of reading big and broken traces (issue 25 item 1), each case in a fresh process.

Cases (written under --work, which is reused between runs):

- `compact`: a valid trace of the smallest events a writer can emit (about 60 bytes each),
  so the columns per byte of JSON are at their highest: the worst case for memory per
  decompressed byte. Gzipped it is about 1% of its size (a 10 MB .gz holds ~1 GB).
- `invalid17`: the same bytes with byte 17 (just after `"traceEvents": [`) made invalid.
- `nokey`: valid JSON of the same size without a `traceEvents` key.
- `--real FILE`: a real trace (e.g. one grown with tools/make_big_trace.py).

For each case it runs `perfdoctor diagnose FILE -o DIR --quiet` (the whole command: parse,
analysis, every report) and, separately, the parse alone (`parse_trace`), and prints wall
seconds, exit code and peak RSS beside the decompressed size and their ratio. Never asserts.

    python benchmarks/trace_memory.py --size-mb 1000 --work /tmp/trace-memory \
        --root ../before-checkout --root .
    python benchmarks/trace_memory.py --real big.pt.trace.json.gz --work /tmp/trace-memory
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

from _common import ROOT, mib, out, run_child, uptime

_EVENT = (
    b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,'
    b'"ts":%d,"dur":1,"args":{"External id":%d}}'
)
_STEP = (
    b'{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%d,"dur":%d}'
)
_STEP_EVERY = 10_000


def decompressed_size(path: Path) -> int:
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with gzip.open(path, "rb") as fh:
        return sum(len(b) for b in iter(lambda: fh.read(1 << 24), b""))


def write_compact(path: Path, size_mb: int, *, key: bytes = b"traceEvents") -> int:
    """A valid trace of `size_mb` MB of compact events, gzipped when the name ends in .gz;
    returns the decompressed size."""
    target = size_mb * 1_000_000
    opener = gzip.open if path.name.endswith(".gz") else open
    written = 0
    with opener(path, "wb") as fh:  # type: ignore[operator]
        head = b'{"' + key + b'": ['
        fh.write(head)
        written += len(head)
        i = 0
        block: list[bytes] = []
        while written < target:
            if i % _STEP_EVERY == 0:
                ev = _STEP % (i // _STEP_EVERY, i, _STEP_EVERY)
            else:
                ev = _EVENT % (i, i)
            piece = (b",\n" if i else b"") + ev
            block.append(piece)
            written += len(piece)
            i += 1
            if len(block) >= 4096:
                fh.write(b"".join(block))
                block.clear()
        tail = b"\n]}\n"
        fh.write(b"".join(block) + tail)
        written += len(tail)
    return written


def corrupt_at(path: Path, offset: int) -> None:
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(b"X")


_PARSE = (
    "import sys; from pathlib import Path\n"
    "from perfdoctor.analyze.trace_events import parse_trace\n"
    "from perfdoctor.errors import PerfdoctorError\n"
    "try:\n    ev = parse_trace(Path(sys.argv[1]))\n    print(len(ev.cpu_ops))\n"
    "except PerfdoctorError as err:\n    print('refused:', err); sys.exit(3)\n"
)


def measure(label: str, trace: Path, decompressed: int, work: Path, roots: list[Path]) -> None:
    """One case under each code root in turn (before/after interleaved, same minute)."""
    for root in roots:
        env = {"PYTHONPATH": str(root)}
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            cmd = [sys.executable, "-m", "perfdoctor", "diagnose", str(trace), "-o", tmp, "--quiet"]
            whole = run_child(cmd, env=env)
        parse = run_child([sys.executable, "-c", _PARSE, str(trace)], env=env)
        for what, res in (("diagnose", whole), ("parse", parse)):
            ratio = res.max_rss_bytes / decompressed if decompressed else float("nan")
            lines = res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or [""]
            out(
                f"| {label} | {root.name} | {trace.stat().st_size / 1e6:.1f} MB | "
                f"{decompressed / 1e6:.0f} MB | {what} | exit {res.returncode} | "
                f"{res.wall_s:.1f} s | {mib(res.max_rss_bytes)} | {ratio:.2f}x | "
                f"{lines[-1][:100]} | {uptime().split('load average:')[-1].strip()} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=1000)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "trace-memory")
    ap.add_argument("--real", type=Path, action="append", default=[])
    ap.add_argument("--cases", default="compact,compact.gz,invalid17,nokey")
    ap.add_argument(
        "--root",
        type=Path,
        action="append",
        default=[],
        help="a checkout to measure (repeat for before/after; default: this one)",
    )
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    out(uptime())
    out(
        "| case | code | on disk | decompressed | command | exit | wall | peak RSS | "
        "RSS / size | last line | load |"
    )
    out("|---|---|---|---|---|---|---|---|---|---|---|")
    cases = args.cases.split(",")
    sizes: dict[str, tuple[Path, int]] = {}
    for case in cases:
        names = {"compact": "compact.json", "compact.gz": "compact.json.gz"}
        name = names.get(case, case + ".json")
        path = args.work / f"{args.size_mb}MB-{name}"
        if not path.exists():
            key = b"traceEventz" if case == "nokey" else b"traceEvents"
            write_compact(path, args.size_mb, key=key)
            if case == "invalid17":
                corrupt_at(path, 17)
        sizes[case] = (path, decompressed_size(path))
    for real in args.real:
        sizes[real.name] = (real, decompressed_size(real))
    for label, (path, size) in sizes.items():
        measure(label, path, size, args.work, args.root or [ROOT])
    out(uptime())


if __name__ == "__main__":
    main()
