from __future__ import annotations

import io
import re

import pytest

from perfdoctor.render.terminal import MAX_WIDTH, make_console, render_terminal

from .fixtures import cpu_report, empty_series_report, hostile_report

ANSI = re.compile(r"\x1b\[")


def _render(report, monkeypatch, **env: str) -> str:
    for key in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    buf = io.StringIO()
    render_terminal(report, make_console(buf))
    return buf.getvalue()


@pytest.mark.parametrize("make", [cpu_report, hostile_report, empty_series_report])
def test_non_tty_output_is_plain_and_fits(make, monkeypatch):
    text = _render(make(), monkeypatch, COLUMNS="160")
    assert not ANSI.search(text)
    assert max(len(line) for line in text.splitlines()) <= MAX_WIDTH


def test_no_color_drops_every_escape_even_on_a_terminal(monkeypatch):
    forced = _render(cpu_report(), monkeypatch, FORCE_COLOR="1", TERM="xterm-256color")
    assert ANSI.search(forced)  # the control: a forced terminal is styled
    plain = _render(cpu_report(), monkeypatch, FORCE_COLOR="1", TERM="xterm-256color", NO_COLOR="1")
    assert not ANSI.search(plain)


def test_content(monkeypatch):
    text = _render(cpu_report(), monkeypatch, COLUMNS="100")
    flat = " ".join(text.split())
    assert "Slow Training waits for the DataLoader: data_wait_frac = 62.0% (> 10.0%)." in flat
    # The speedup beside the two step times it is the ratio of (41.8 / 17.2 = 2.43).
    assert "dataloader-workers: 2.43x ± 0.06 faster, step 41.5→17.1 ms (the baseline's step" in flat
    assert "sample_models/image_cnn.py:48 (main)" in flat
    assert "2.43x ± 0.06" in flat and "rejected" in flat
    assert "3 rule(s) skipped" in flat
    assert "perfdoctor tensorboard perfdoctor-runs/20260101-120000-image_cnn" in flat
    # Findings come in report order, ranked.
    assert flat.index("1. [critical]") < flat.index("2. [warning]") < flat.index("3. [info]")


def test_hostile_markup_is_printed_not_interpreted(monkeypatch):
    text = _render(hostile_report(), monkeypatch, COLUMNS="100")
    flat = "".join(text.split())
    assert "[/][bold]unbalancedmarkup" in flat
    assert "<script>alert(1)</script>" in flat


def test_crashed_run_is_flagged(monkeypatch):
    text = _render(empty_series_report(), monkeypatch, COLUMNS="100")
    assert "crashed (exit code 1)" in " ".join(text.split())
    assert "none measured" in text


def test_narrow_terminal_keeps_every_figure_whole(monkeypatch):
    text = _render(cpu_report(), monkeypatch, COLUMNS="80")
    assert max(len(line) for line in text.splitlines()) <= 80
    # No no-wrap cell was cropped: verdicts and speedups read in full on one line.
    assert re.search(r"dataloader-workers .*2\.43x ± 0\.06 .* accepted", text)
    assert re.search(r"set-num-threads .*1\.01x ± 0\.04 .* rejected", text)
    assert "dataloader-workers (✓ applied): accepted" in text


def test_a_squeezed_breakdown_table_crops_its_bars_not_its_labels_or_figures():
    """ddp_train.py's report at 100 columns printed "optimiz…  0.0551 …  1.…" beside a wide
    step table: the bars must give way first."""
    from rich.console import Console

    from perfdoctor.render.terminal import _breakdown_table

    parts = [("data", 0.1, 0.025), ("backward", 3.42, 0.869), ("optimizer", 0.0551, 0.014)]
    out = io.StringIO()
    Console(file=out, width=40, color_system=None).print(_breakdown_table(parts))
    text = out.getvalue()
    assert "optimizer" in text and "0.0551 ms" in text and "86.9%" in text
    assert "…" not in text
