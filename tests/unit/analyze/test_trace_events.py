"""Parsing edge cases: file forms, number types, missing and unknown fields."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.analyze.trace_events import GPU_KIND_KERNEL, GPU_KIND_MEMCPY, parse_trace
from perfdoctor.errors import CorruptArtifact


def test_object_form_splits_categories_and_drops_unknown_ones(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cuda_two_steps.json")
    assert len(ev.annotations) == 4  # 2 ProfilerSteps, DataLoader, zero_grad
    assert len(ev.python) == 11
    assert len(ev.cpu_ops) == 10
    assert len(ev.gpu) == 8
    assert len(ev.runtime) == 10
    assert "something new" not in ev.names  # unknown category ignored
    assert ev.device_properties[0]["computeMajor"] == 9


def test_integer_and_float_timestamps_parse_as_float_microseconds(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cuda_two_steps.json")
    assert ev.gpu.ts.dtype == np.float64
    nvjet = ev.names.index("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTN")
    row = int(np.flatnonzero(ev.gpu.name == nvjet)[0])
    assert ev.gpu.ts[row] == 100.0 and ev.gpu.dur[row] == 200.0  # written as ints
    assert ev.python.ts[0] == 0.0 and ev.python.dur[0] == 2000.0  # written as floats


def test_gpu_rows_carry_kind_device_stream_correlation_and_bytes(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cuda_two_steps.json")
    kinds = ev.gpu.col("kind")
    assert int((kinds == GPU_KIND_KERNEL).sum()) == 5
    assert int((kinds == GPU_KIND_MEMCPY).sum()) == 3
    assert set(ev.gpu.col("stream").tolist()) == {7, 13, 20}
    assert set(ev.gpu.col("device").tolist()) == {0}
    pageable = ev.names.index("Memcpy HtoD (Pageable -> Device)")
    row = int(np.flatnonzero(ev.gpu.name == pageable)[0])
    assert ev.gpu.col("bytes")[row] == 3000
    assert ev.gpu.col("correlation")[row] == 5
    driver = ev.runtime.col("driver")
    assert int(driver.sum()) == 1  # the Triton cuLaunchKernel


def test_python_ids_and_missing_parent(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cuda_two_steps.json")
    assert ev.python.col("py_id").tolist()[:3] == [1, 2, 3]
    assert ev.python.col("py_parent")[0] == -1  # "Python parent id": null


def test_record_shapes_payload_is_decoded_only_for_gemm_and_conv_ops(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cuda_two_steps.json")
    decoded = {ev.names[int(ev.cpu_ops.name[row])] for row in ev.shapes}
    assert decoded == {"aten::linear", "aten::addmm"}
    types, dims = next(
        v for r, v in ev.shapes.items() if ev.names[ev.cpu_ops.name[r]] == "aten::addmm"
    )
    assert types[0] == "c10::BFloat16" and dims[1] == [4, 30]


def test_array_form_missing_args_and_non_integer_ids(fixtures: Path) -> None:
    ev = parse_trace(fixtures / "cpu_array_form.json")
    assert len(ev.cpu_ops) == 5
    assert ev.cpu_ops.col("external_id").tolist() == [-1, -1, -1, -1, -1]
    assert len(ev.gpu) == 0 and len(ev.runtime) == 0 and len(ev.python) == 0


def test_gzip_and_plain_give_the_same_arrays(fixtures: Path, tmp_path: Path) -> None:
    plain = fixtures / "cuda_two_steps.json"
    packed = tmp_path / "w.1.pt.trace.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = parse_trace(plain), parse_trace(packed)
    assert a.names == b.names
    assert np.array_equal(a.gpu.ts, b.gpu.ts) and np.array_equal(a.cpu_ops.dur, b.cpu_ops.dur)


@pytest.mark.parametrize(
    "content",
    [
        b"this is not json",
        b'{"traceEvents": 5}',
        b'{"traceEvents": [{"ph": "X", "ts": "soon"}]}',
        b"",
    ],
)
def test_corrupt_trace_raises_one_line_error_naming_the_file(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(CorruptArtifact) as err:
        parse_trace(path)
    assert "bad.pt.trace.json" in str(err.value)
    assert "\n" not in str(err.value)


def test_truncated_gzip_is_corrupt(fixtures: Path, tmp_path: Path) -> None:
    packed = gzip.compress((fixtures / "cuda_two_steps.json").read_bytes())
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(CorruptArtifact, match=r"cut\.pt\.trace\.json\.gz"):
        parse_trace(path)


def test_trace_without_events_is_unusable(tmp_path: Path) -> None:
    # Nothing to analyse is an error the user must see, not an empty summary.
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(CorruptArtifact, match="no events"):
        parse_trace(path)


def test_trace_with_only_metadata_parses_to_empty_tables(tmp_path: Path) -> None:
    # Valid, but no GPU and no steps: not an error.
    path = tmp_path / "meta.json"
    meta = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}
    path.write_text(json.dumps({"traceEvents": [meta]}))
    ev = parse_trace(path)
    assert len(ev.cpu_ops) == len(ev.gpu) == len(ev.python) == len(ev.gpu_annotations) == 0
