"""The profiler window's trace writer: kineto's JSON, its bare quotes repaired, gzipped in
chunks of lines (a write per line was most of the export); the same bytes whatever the
chunk size."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfdoctor.collect import profiler_window


class FakeProfile:
    """Writes a kineto-like trace, one pair per line, with a script named tr"ain.py."""

    def __init__(self, events: int) -> None:
        self.events = events

    def export_chrome_trace(self, path: str) -> None:
        lines = ["{\n", '  "traceEvents": [\n']
        for i in range(self.events):
            sep = "," if i + 1 < self.events else ""
            lines += [
                "  {\n",
                f'    "name": "tr"ain.py({i}): <module>",\n',
                f'    "ts": {i},\n',
                '    "ph": "X"\n',
                f"  }}{sep}\n",
            ]
        lines += ["  ]\n", "}\n"]
        Path(path).write_text("".join(lines))


@pytest.mark.parametrize("chunk", [64, 1 << 22])
def test_the_trace_is_repaired_and_whole_at_any_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(profiler_window, "TRACE_CHUNK_BYTES", chunk)
    profiler_window._trace_writer(tmp_path, "worker")(FakeProfile(500))
    (written,) = list(tmp_path.glob("worker.*.pt.trace.json.gz"))
    trace = json.loads(gzip.decompress(written.read_bytes()))
    names = [e["name"] for e in trace["traceEvents"]]
    assert names == [f'tr"ain.py({i}): <module>' for i in range(500)]
    assert not list(tmp_path.glob(".*"))  # no temporary file left
