"""Long runs (issue 31, scale): every per-step statistic stays linear in the step count.

The memory-growth fit took the median of all n*(n-1)/2 pairwise slopes (a 500,000-step run
asked for 233 GiB) and the speed bootstrap resampled every step 2,000 times (hours at 20,000
steps). Both are bounded now; these tests hold them to it at 1,000,000 steps, on synthetic
series (no child run), in seconds. And a gzip bomb stops at its decompressed-size budget."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.analyze import trace_stream
from perfdoctor.analyze.growth import growth_fit_sampled
from perfdoctor.analyze.growth import sustained_growth as _sustained_growth
from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.cli import app
from perfdoctor.errors import EXIT_BAD_RUN_DIR, CorruptArtifact
from perfdoctor.optimize import estimate

STEPS = 1_000_000
# Bytes of traced memory per step the growth fit may peak at, beyond its input: its sorted
# copy, two float arrays and residuals (~60 B/step measured). All pairs would be 4e12 B/step.
GROWTH_FIT_BYTES_PER_STEP = 150
# The bootstrap's traced peak, whatever the run's length: one block of draws (200 x 2,000).
BOOTSTRAP_PEAK_BYTES = 24 << 20


def _peak(fn):  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_growth_fit_at_a_million_steps_is_linear_and_finds_the_leak() -> None:
    # A 64 B/step leak under up to 1 MiB of allocator jitter (deterministic).
    points = [(float(i), 3.5e8 + 64.0 * i + float((i * 7919) % (1 << 20))) for i in range(STEPS)]
    (rate, over_noise), peak = _peak(lambda: _sustained_growth(points))
    assert peak < GROWTH_FIT_BYTES_PER_STEP * STEPS, peak
    assert rate == pytest.approx(64.0, rel=0.05)
    assert over_noise is not None and over_noise > 3
    assert growth_fit_sampled(STEPS) and not growth_fit_sampled(400)


def test_growth_fit_on_a_flat_long_series_finds_no_growth() -> None:
    points = [(float(i), 3.5e8 + float((i * 7919) % (1 << 20))) for i in range(200_000)]
    assert _sustained_growth(points) == (0.0, 0.0)


def test_speed_bootstrap_at_a_million_steps_is_bounded() -> None:
    a = tuple(3.0 + ((i * 7919) % 1000) / 1000 for i in range(STEPS))
    base = RunSample(label="a", step_ms=a)
    faster = RunSample(label="b", step_ms=tuple(x / 1.25 for x in a))
    pairs = [(base, faster)]
    boot, peak = _peak(lambda: estimate._bootstrap_log_ratios(pairs, 2000, 1))
    assert peak < BOOTSTRAP_PEAK_BYTES, peak
    assert len(boot) == 2000
    found = estimate.estimate_speedup([base], [faster])
    assert found is not None
    assert found.speedup == pytest.approx(1.25)
    # m-out-of-n, rescaled: the band of a million steps is narrow, not the band of 2,000.
    assert 0 < found.bootstrap_half_width < 0.01


def test_short_runs_keep_the_full_bootstrap_draw_for_draw() -> None:
    a = RunSample(label="a", step_ms=tuple(3.0 + (i % 13) / 10 for i in range(300)))
    b = RunSample(label="b", step_ms=tuple(2.0 + (i % 11) / 10 for i in range(300)))
    one = estimate._bootstrap_log_ratios([(a, b)], 50, 7)
    assert one == estimate._bootstrap_log_ratios([(a, b)], 50, 7)
    assert len(set(one)) > 5


def _bomb(path: Path, decompressed: int) -> None:
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 5}
    line = (json.dumps(event) + ",\n").encode()
    block = line * 4000
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [co.compress(b'{"traceEvents":[\n')]
    for _ in range(decompressed // len(block) + 1):
        parts.append(co.compress(block))
    parts += [co.compress(line[:-2] + b"\n]}"), co.flush()]
    path.write_bytes(b"".join(parts))


def test_gzip_bomb_stops_at_its_decompressed_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The floor lowered so that a 24 MB bomb (about 400:1) shows it in a second.
    monkeypatch.setattr(trace_stream, "GZIP_FLOOR_BYTES", 4 << 20)
    bomb = tmp_path / "bomb.pt.trace.json.gz"
    _bomb(bomb, 24 << 20)
    assert bomb.stat().st_size * trace_stream.GZIP_RATIO_MAX < 24 << 20
    with pytest.raises(CorruptArtifact, match="gzip bomb") as err:
        parse_trace(bomb)
    assert "\n" not in str(err.value)
    result = CliRunner().invoke(app, ["diagnose", str(bomb), "-o", str(tmp_path / "out")])
    assert result.exit_code == EXIT_BAD_RUN_DIR, result.output
    assert "decompresses to more than" in result.output


def test_ordinary_gzip_ratios_pass_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_stream, "GZIP_FLOOR_BYTES", 1 << 10)
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10,
            "dur": 5,
            "args": {"External id": i, "Sequence number": i * 7 % 1013},
        }
        for i in range(20_000)
    ]
    path = tmp_path / "fine.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    assert parse_trace(path) is not None
