from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest

from perfdoctor.errors import CorruptArtifact
from perfdoctor.render.json_report import render_json, report_from_dict, report_to_dict
from perfdoctor.rundir import SCHEMA_VERSION

from .fixtures import cpu_report, empty_series_report, hostile_report
from .golden_files import assert_matches_golden


@pytest.mark.parametrize("make", [cpu_report, hostile_report, empty_series_report])
def test_round_trip_is_exact(make):
    report = make()
    text = render_json(report)
    assert report_from_dict(json.loads(text)) == report


def test_round_trip_keeps_types():
    back = report_from_dict(json.loads(render_json(cpu_report())))
    assert isinstance(back.argv, tuple)
    assert isinstance(back.findings[0].evidence, tuple)
    assert back.findings[0].locations[0].line == 48
    assert back.variants[0].applied[0].verified is True
    assert back.device is not None and back.device.cpu_cores_logical == 2
    assert back.baseline.breakdown_ms["data"] == 25.1


def test_required_keys_and_order():
    data = report_to_dict(cpu_report())
    assert next(iter(data)) == "schema_version"
    assert data["schema_version"] == SCHEMA_VERSION
    for key in ("script", "exit_code", "baseline", "findings", "recommendations", "variants"):
        assert key in data
    baseline = data["baseline"]
    for key in (
        "steps_timed",
        "optimizer_steps",
        "micro_batches_per_step",
        "step_ms_p50",
        "step_ms_p90",
        "data_wait_frac",
    ):
        assert key in baseline
    assert baseline["step_detection"] in ("optimizer", "backward", "time")
    finding = data["findings"][0]
    assert {"rule_id", "severity", "title", "evidence", "locations"} <= set(finding)
    variant = data["variants"][0]
    assert {
        "label",
        "optimizations",
        "step_ms_p50",
        "speedup",
        "speedup_noise",
        "peak_memory_bytes",
        "loss_delta",
        "verdict",
        "reason",
    } <= set(variant)
    assert {v["verdict"] for v in data["variants"]} == {"accepted", "rejected"}


def test_non_finite_numbers_become_null():
    report = cpu_report()
    bad = replace(report.variants[0], speedup=math.nan, speedup_noise=math.inf)
    text = render_json(replace(report, variants=(bad, *report.variants[1:])))
    data = json.loads(text)  # strict JSON: NaN would not parse with allow_nan=False writers
    assert data["variants"][0]["speedup"] is None
    assert data["variants"][0]["speedup_noise"] is None


def test_newer_schema_is_refused():
    data = report_to_dict(cpu_report())
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(CorruptArtifact, match="schema_version"):
        report_from_dict(data)


def test_missing_required_key_is_a_clear_error():
    data = report_to_dict(cpu_report())
    del data["baseline"]["steps_timed"]
    with pytest.raises(CorruptArtifact, match=re.escape("report.baseline has no 'steps_timed'")):
        report_from_dict(data)


def test_wrong_shape_is_a_clear_error():
    data = report_to_dict(cpu_report())
    data["findings"] = {"not": "a list"}
    with pytest.raises(CorruptArtifact, match=re.escape("report.findings should be a list")):
        report_from_dict(data)


def test_unknown_keys_are_ignored_and_optional_keys_default():
    data = report_to_dict(cpu_report())
    data["added_by_a_newer_minor_version"] = 1
    data["findings"][0]["also_new"] = True
    del data["series"]
    del data["warnings"]
    back = report_from_dict(data)
    assert back.series == {}
    assert back.warnings == ()
    assert back.findings == cpu_report().findings


def test_json_golden():
    assert_matches_golden("report.json", render_json(cpu_report()))


def test_numpy_values_are_written_as_plain_numbers():
    import numpy as np

    report = cpu_report(
        facts={"a": np.float64(1.5), "b": np.int64(3)},
        series={
            "memory": {"baseline": {"t_s": np.array([0.0, np.nan]), "peak_index": np.int64(0)}}
        },
    )
    data = json.loads(render_json(report))
    assert data["facts"] == {"a": 1.5, "b": 3}
    assert data["series"]["memory"]["baseline"] == {"t_s": [0.0, None], "peak_index": 0}
