from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from perfdoctor.render.tensorboard_export import write_scalars

from .fixtures import HOSTILE, cpu_report


def _read(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return acc


def _values(acc, tag):
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]


def test_scalars_round_trip_through_event_files(tmp_path):
    report = cpu_report()
    written = write_scalars(tmp_path, report)
    assert {p.parent.name for p in written} == {"baseline", "dataloader-workers", "set-num-threads"}

    acc = _read(tmp_path / "baseline")
    tags = set(acc.Tags()["tensors"])
    assert {"step/wall_ms", "step/data_wait_ms", "step/loss", "util/cpu_percent"} <= tags
    assert "memory/rss_MiB" in tags
    steps = report.series["steps"]["baseline"]
    wall = _values(acc, "step/wall_ms")
    assert [s for s, _ in wall] == steps["index"]
    # TensorBoard stores float32.
    assert [v for _, v in wall] == pytest.approx(steps["wall_ms"], rel=1e-6)
    samples = report.series["samples"]["baseline"]
    cpu = _values(acc, "util/cpu_percent")
    assert [s for s, _ in cpu] == [round(t * 1000) for t in samples["t"]]
    # Series carry fractions; TensorBoard shows percent.
    assert [v for _, v in cpu] == pytest.approx([u * 100 for u in samples["cpu_util"]])
    # Variants without samples get only step scalars.
    assert "util/cpu_percent" not in _read(tmp_path / "set-num-threads").Tags()["tensors"]


def test_rewriting_replaces_the_previous_event_file(tmp_path):
    write_scalars(tmp_path, cpu_report())
    write_scalars(tmp_path, cpu_report())
    assert len(list((tmp_path / "baseline").glob("events.out.tfevents.*"))) == 1
    assert len(_values(_read(tmp_path / "baseline"), "step/wall_ms")) == 28


def test_series_mapping_and_missing_values(tmp_path):
    series = {"steps": {"baseline": {"index": [0, 1, 2], "wall_ms": [1.0, None, float("nan")]}}}
    write_scalars(tmp_path, series)
    assert _values(_read(tmp_path / "baseline"), "step/wall_ms") == [(0, 1.0)]


def test_hostile_label_stays_inside_the_session(tmp_path):
    session = tmp_path / "session"
    series = {"steps": {f"../{HOSTILE}": {"index": [0], "wall_ms": [1.0]}}}
    written = write_scalars(session, series)
    assert len(written) == 1
    assert written[0].resolve().parent.parent == session.resolve()
