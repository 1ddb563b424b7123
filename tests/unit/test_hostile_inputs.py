"""Files other people hand perfdoctor: what a hostile or broken one may cost (one line and a
documented exit code, bounded time, nothing written outside the run directory)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor.analyze.memory import load_memory
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.cli import app
from perfdoctor.diagnose import analyze_session, write_reports
from perfdoctor.diagnose_traces import diagnose_traces, write_trace_reports
from perfdoctor.errors import EXIT_BAD_RUN_DIR, CorruptArtifact
from perfdoctor.rundir import append_jsonl, write_json

FIXTURE_RUN = Path(__file__).parent.parent / "fixtures" / "runs" / "tuned_mlp_cpu"
ANALYZE_FIXTURES = Path(__file__).parent / "analyze" / "fixtures"
DEEP = "[" * 1000 + "]" * 1000  # 2 KB


def _session(tmp_path: Path) -> Path:
    session = tmp_path / "session"
    shutil.copytree(FIXTURE_RUN, session / "baseline")
    return session


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


# ------------------------------------------------------------------ 1. no writes through links


def test_session_reports_replace_links_instead_of_writing_through_them(tmp_path: Path) -> None:
    session = _session(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    for name in ("report.md", "report.html", "report.json"):
        (session / name).symlink_to(victim)
    write_reports(session, analyze_session(session))
    assert victim.read_text() == "keep me"
    for name in ("report.md", "report.html", "report.json"):
        assert not (session / name).is_symlink() and (session / name).stat().st_size > 0
    assert not list(session.glob(".*.tmp"))


def test_trace_reports_and_json_helpers_do_not_follow_links(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "report.md").symlink_to(victim)
    (out / "state.json").symlink_to(victim)
    (out / "rows.jsonl").symlink_to(victim)
    trace = tmp_path / "in" / "t.json"
    trace.parent.mkdir()
    shutil.copy(ANALYZE_FIXTURES / "cuda_two_steps.json", trace)
    (done,) = diagnose_traces([trace], out)
    assert done.report is not None
    write_trace_reports(done.report)
    write_json(out / "state.json", {"a": 1})
    with pytest.raises(OSError):
        append_jsonl(out / "rows.jsonl", [{"a": 1}])
    assert victim.read_text() == "keep me"
    assert json.loads((out / "state.json").read_text()) == {"a": 1}
    mode = stat.S_IMODE((out / "state.json").stat().st_mode)
    assert mode & 0o044 == 0o044 & ~_umask()  # readable as a plain open() would make it


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------ 3. JSON nested 1,000 deep


@pytest.mark.parametrize(
    "doc",
    [
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"x": %s}}]}',
        '[{"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"x": %s}}]',
        '{"traceEvents": [], "deviceProperties": [{"x": %s}]}',
        '{"traceEvents": [], "distributedInfo": {"x": %s}}',
    ],
)
def test_deeply_nested_trace_is_a_corrupt_artifact(tmp_path: Path, doc: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(doc % DEEP)
    for chunk in (None, 64):
        with pytest.raises(CorruptArtifact):
            parse_trace(path, chunk_bytes=chunk)
    gz = tmp_path / "deep.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    result = _invoke("diagnose", str(gz), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_BAD_RUN_DIR, result.output


@pytest.mark.parametrize(
    "name", ["manifest.json", "spec.json", "observations.json", "session.json"]
)
def test_deeply_nested_run_json_is_a_corrupt_artifact(tmp_path: Path, name: str) -> None:
    session = _session(tmp_path)
    target = session / name if name == "session.json" else session / "baseline" / name
    target.write_text('{"x": ' + DEEP + "}")
    with pytest.raises(CorruptArtifact, match="nested"):
        analyze_session(session)


@pytest.mark.parametrize("name", ["steps.jsonl", "samples.jsonl", "progress.jsonl"])
def test_deeply_nested_jsonl_line_is_skipped(tmp_path: Path, name: str) -> None:
    session = _session(tmp_path)
    with (session / "baseline" / name).open("a") as fh:
        fh.write('{"x": ' + DEEP + "}\n")
    record = load_run(session / "baseline")
    assert record.steps


# ------------------------------------------------------------------ 7. memory snapshot blow-ups


def _timed_load(path: Path) -> float:
    start = time.process_time()
    with pytest.raises(CorruptArtifact) as info:
        load_memory(path)
    assert "\n" not in str(info.value)
    return time.process_time() - start


def test_snapshot_sharing_one_history_across_devices_is_refused_fast(tmp_path: Path) -> None:
    # 12 KB: 3,000 devices whose history is one shared list of 3,000 entries (9 million
    # entries to replay; before: about 30 s of CPU).
    entry = {"action": "alloc", "addr": 1, "size": 8, "frames": []}
    history = [entry] * 3000
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [history] * 3000}))
    assert path.stat().st_size < 20_000
    assert _timed_load(path) < 2.0


def test_snapshot_naming_thousands_of_devices_is_refused_fast(tmp_path: Path) -> None:
    segments = [{"device": i, "total_size": 1, "blocks": []} for i in range(3000)]
    path = tmp_path / "devices.pickle"
    path.write_bytes(pickle.dumps({"segments": segments, "device_traces": []}))
    assert _timed_load(path) < 2.0


def test_snapshot_holding_itself_is_refused(tmp_path: Path) -> None:
    loop: list = []
    loop.append(loop)
    path = tmp_path / "loop.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [loop]}))
    assert _timed_load(path) < 2.0


def test_snapshot_on_several_devices_is_still_read(tmp_path: Path) -> None:
    def seg(device: int, size: int) -> dict:
        block = {"size": size, "requested_size": size, "state": "active_allocated"}
        return {"device": device, "total_size": size, "address": 0, "blocks": [block]}

    path = tmp_path / "two.pickle"
    path.write_bytes(pickle.dumps({"segments": [seg(0, 100), seg(1, 300), seg(1, 200)]}))
    summary = load_memory(path)
    assert summary.device == 1 and summary.peak_allocated_bytes == 500 and summary.segments == 2


# ------------------------------------------------------------------ 4, 5. what diagnose walks


def test_links_to_the_directory_itself_are_walked_once(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir" / "run"
    logdir.mkdir(parents=True)
    shutil.copy(ANALYZE_FIXTURES / "cuda_two_steps.json", logdir / "t.json")
    # Before: 2**depth paths, still walking after 300 s.
    for name in ("a", "b", "c"):
        (logdir / name).symlink_to(".")
    (logdir / "up").symlink_to("..")
    start = time.monotonic()
    done = diagnose_traces([tmp_path / "logdir"], tmp_path / "out")
    assert time.monotonic() - start < 10
    assert len(done) == 1 and done[0].report is not None


@pytest.mark.parametrize("special", ["fifo", "/dev/null", "/dev/zero"])
def test_special_files_are_refused_in_one_line(tmp_path: Path, special: str) -> None:
    if special == "fifo":
        path = tmp_path / "trace.json"
        os.mkfifo(path)  # opening it would block until a writer comes
    else:
        path = Path(special)
    result = _invoke("diagnose", str(path), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_BAD_RUN_DIR, result.output
    assert "not a regular file" in result.output


def test_special_files_inside_a_directory_are_skipped(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    shutil.copy(ANALYZE_FIXTURES / "cuda_two_steps.json", logdir / "t.json")
    os.mkfifo(logdir / "blocked.pt.trace.json")
    (logdir / "zero.pickle").symlink_to("/dev/zero")
    done = diagnose_traces([logdir], tmp_path / "out")
    assert [d.run.name for d in done] == ["t"] and done[0].report is not None


# ------------------------------------------------------------------ 6. steps.jsonl amiss


def test_missing_steps_file_is_a_warning(tmp_path: Path) -> None:
    session = _session(tmp_path)
    (session / "baseline" / "steps.jsonl").unlink()
    report = analyze_session(session)
    assert any("steps.jsonl is missing" in w for w in report.warnings)


def test_unreadable_step_lines_are_counted_in_a_warning(tmp_path: Path) -> None:
    session = _session(tmp_path)
    steps = session / "baseline" / "steps.jsonl"
    good = steps.read_text().splitlines()
    steps.write_text("\n".join(["garbage", '{"index": ', *good[:3], "\x00\x01"]) + "\n")
    report = analyze_session(session)
    assert any("3 line(s) could not be read" in w and "3 read" in w for w in report.warnings)
    # A torn last line (the writer was killed mid-line) is no warning.
    steps.write_text("\n".join(good) + '\n{"index": 9')
    assert not any("could not be read" in w for w in analyze_session(session).warnings)


# ------------------------------------------------------------------ 2. terminal escapes

_HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\x9bname"


def test_names_from_a_trace_reach_no_terminal_raw(tmp_path: Path) -> None:
    doc = json.loads((ANALYZE_FIXTURES / "cuda_two_steps.json").read_text())
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("name"), str) and ev.get("cat") in ("kernel", "cpu_op"):
            ev["name"] = _HOSTILE + ev["name"]
    for props in doc.get("deviceProperties", []):
        props["name"] = _HOSTILE
    trace = tmp_path / f"{_HOSTILE}.json"
    trace.write_text(json.dumps(doc))
    result = _invoke("diagnose", str(trace), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "\\x1b[2J" in result.output  # shown, escaped
    for raw in ("\x1b", "\x07", "\x9b"):
        assert raw not in result.output
        assert raw not in (tmp_path / "out" / "report.md").read_text()


def test_error_lines_show_no_raw_escapes_or_markup(tmp_path: Path) -> None:
    path = tmp_path / f"[bold]{_HOSTILE}.pickle"
    path.write_bytes(b"not a pickle")
    result = _invoke("diagnose", str(path), "-o", str(tmp_path / "out"))
    assert result.exit_code == EXIT_BAD_RUN_DIR
    assert "\x1b" not in result.output and "[bold]" in result.output


_BIDI_CONTROLS = ("\u202e", "\u2066", "\u2069", "\u200f")
_BIDI = "\u202eexe.\u2066x\u2069\u200f"


def test_bidi_controls_in_names_and_paths_are_shown_escaped(tmp_path: Path) -> None:
    doc = json.loads((ANALYZE_FIXTURES / "cuda_two_steps.json").read_text())
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("name"), str) and ev.get("cat") in ("kernel", "cpu_op"):
            ev["name"] = _BIDI + ev["name"]
    trace = tmp_path / f"run{_BIDI}.json"
    trace.write_text(json.dumps(doc))
    result = _invoke("diagnose", str(trace), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "\\u202e" in result.output  # shown, escaped
    for name in ("report.md", "report.html"):
        text = (tmp_path / "out" / name).read_text()
        assert "\\u202e" in text, name
        for raw in _BIDI_CONTROLS:
            assert raw not in text, (name, hex(ord(raw)))
    for raw in _BIDI_CONTROLS:
        assert raw not in result.output
