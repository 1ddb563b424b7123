"""Every kineto format variant maps onto the same TraceEvents tables."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perfdoctor.analyze.kernels import is_copy_call, is_launch_call, is_sync_call
from perfdoctor.analyze.trace import summarize_trace
from perfdoctor.analyze.trace_events import (
    GPU_KIND_MEMCPY,
    GPU_KIND_MEMSET,
    EventBuilder,
    parse_trace,
)
from perfdoctor.analyze.trace_index import find_steps, launch_rows
from perfdoctor.analyze.trace_meta import (
    gfx_arch_from_kernels,
    parse_device,
    parse_distributed,
)
from perfdoctor.errors import CorruptArtifact


def _write(tmp_path: Path, doc: Any, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=1))
    return path


def _names(ev: Any, table: Any) -> list[str]:
    return [ev.names[c] for c in table.name.tolist()]


def _trace_2021() -> dict[str, Any]:
    """The shape of a torch 1.8-1.9 trace (kineto tb_plugin's test input)."""
    cpu = {"pid": 24572, "tid": "24572"}
    ev = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#2", "ts": 100, "dur": 900, **cpu},
        {
            "ph": "X",
            "cat": "Operator",
            "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "ts": 110,
            "dur": 300,
            **cpu,
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::mm",
            "ts": 500,
            "dur": 50,
            **cpu,
            "args": {"External id": 7},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "ts": 510,
            "dur": 10,
            **cpu,
            "args": {"cbid": 211, "correlation": 311, "external id": 7},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaMemcpyAsync",
            "ts": 530,
            "dur": 5,
            **cpu,
            "args": {"correlation": 312, "external id": 7},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "volta_sgemm_128x64_nn",
            "pid": 0,
            "tid": "stream 7",
            "ts": 600,
            "dur": 40,
            "args": {"device": 0, "stream": 7, "correlation": 311, "external id": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 650,
            "dur": 4,
            "args": {"device": 0, "stream": 7, "correlation": 312, "bytes": 640},
        },
        {
            "ph": "X",
            "cat": "Memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 660,
            "dur": 1,
            "args": {"device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "Python function",
            "name": "train.py(10): step",
            "ts": 105,
            "dur": 800,
            **cpu,
            "args": {"Python id": 1, "Python parent id": 0},
        },
        {
            "ph": "s",
            "id": 311,
            "pid": 24572,
            "tid": 24572,
            "ts": 510,
            "cat": "async",
            "name": "launch",
        },
        {
            "ph": "f",
            "id": 311,
            "pid": 0,
            "tid": "stream 7",
            "ts": 600,
            "cat": "async",
            "name": "launch",
            "bp": "e",
        },
    ]
    props = [
        {
            "id": 0,
            "name": "Tesla V100-DGXS-32GB",
            "totalGlobalMem": 34084028416,
            "major": 7,
            "minor": 0,
            "warpSize": 32,
        }
    ]
    return {"schemaVersion": 1, "computeProperties": props, "traceEvents": ev}


def test_2021_categories_fill_the_current_tables(tmp_path: Path) -> None:
    ev = parse_trace(_write(tmp_path, _trace_2021()))
    assert _names(ev, ev.cpu_ops) == ["aten::mm"]
    # record_function spans under Operator go where current kineto files them.
    assert sorted(_names(ev, ev.annotations)) == [
        "ProfilerStep#2",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    ]
    assert ev.cpu_ops.col("external_id").tolist() == [7]
    assert sorted(ev.runtime.col("external_id").tolist()) == [7, 7]
    assert ev.gpu.col("kind").tolist() == [0, GPU_KIND_MEMCPY, GPU_KIND_MEMSET]
    assert ev.gpu.col("stream").tolist() == [7, 7, 7]
    assert len(ev.python) == 1 and ev.python.col("py_id").tolist() == [1]
    assert find_steps(ev).numbers == (2,)
    (dev,) = ev.devices
    assert dev.vendor == "NVIDIA" and dev.compute_capability == (7, 0)
    summary = summarize_trace(ev)
    assert summary.steps == 1
    assert summary.dataloader_ms_per_step == pytest.approx(0.3)
    assert summary.gpu is not None and summary.gpu.kernels_per_step == 1.0
    assert summary.gpu.kernel_launches_per_step == 1.0


def test_steps_filed_as_cpu_ops_are_found(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "ProfilerStep#5",
                "ts": 0,
                "dur": 10,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "ProfilerStep#6",
                "ts": 10,
                "dur": 12,
                "pid": 1,
                "tid": 1,
            },
        ]
    }
    steps = find_steps(parse_trace(_write(tmp_path, doc)))
    assert steps.numbers == (5, 6)
    assert steps.durations_ms().tolist() == pytest.approx([0.010, 0.012])


def test_gpu_user_annotations_are_kept_apart_from_steps(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "ts": 0.5,
                "dur": 100.25,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "ProfilerStep#1",
                "ts": 20,
                "dur": 200,
                "pid": 2,
                "tid": 0,
                "args": {"External id": 1},
            },
        ]
    }
    ev = parse_trace(_write(tmp_path, doc))
    assert find_steps(ev).numbers == (1,)
    assert find_steps(ev).durations_ms().tolist() == [pytest.approx(0.10025)]
    assert _names(ev, ev.gpu_annotations) == ["ProfilerStep#1"]
    assert ev.gpu_annotations.col("device").tolist() == [2]
    assert ev.gpu_annotations.col("stream").tolist() == [0]
    assert ev.gpu_annotations.col("external_id").tolist() == [1]


def test_missing_dur_and_begin_end_pairs(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 5, "pid": 1, "tid": 1},
            {"ph": "B", "cat": "cpu_op", "name": "aten::mul", "ts": 10, "pid": 1, "tid": 1},
            {"ph": "B", "cat": "cpu_op", "name": "aten::mul_", "ts": 12, "pid": 1, "tid": 1},
            {"ph": "E", "ts": 15, "pid": 1, "tid": 1},
            {"ph": "E", "ts": 30, "pid": 1, "tid": 1},
            {"ph": "E", "ts": 31, "pid": 1, "tid": 2},  # unmatched: dropped
            {"ph": "i", "cat": "cpu_op", "name": "mark", "ts": 40, "pid": 1, "tid": 1},
        ]
    }
    ev = parse_trace(_write(tmp_path, doc))
    got = sorted(
        zip(_names(ev, ev.cpu_ops), ev.cpu_ops.ts.tolist(), ev.cpu_ops.dur.tolist(), strict=True)
    )
    assert got == [("aten::add", 5.0, 0.0), ("aten::mul", 10.0, 20.0), ("aten::mul_", 12.0, 3.0)]


def test_flows_link_launches_when_correlation_is_missing(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": 10,
                "dur": 5,
                "pid": 1,
                "tid": 1,
            },
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 20, "dur": 5, "pid": 0, "tid": 7},
            {"ph": "X", "cat": "kernel", "name": "orphan", "ts": 40, "dur": 5, "pid": 0, "tid": 7},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 99, "ts": 10, "pid": 1, "tid": 1},
            {
                "ph": "f",
                "cat": "ac2g",
                "name": "ac2g",
                "id": 99,
                "ts": 20,
                "pid": 0,
                "tid": 7,
                "bp": "e",
            },
            # A forward->backward flow is not a launch link.
            {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 5, "ts": 40, "pid": 0, "tid": 7},
        ]
    }
    ev = parse_trace(_write(tmp_path, doc))
    assert ev.runtime.col("correlation").tolist() == [99]
    by_name = dict(zip(_names(ev, ev.gpu), ev.gpu.col("correlation").tolist(), strict=True))
    assert by_name == {"k": 99, "orphan": -1}
    rows = launch_rows(ev, np.arange(len(ev.gpu)))
    assert sorted(rows.tolist()) == [-1, 0]


def test_rocm_runtime_calls_are_classified() -> None:
    for name in (
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipGraphLaunch",
        "cudaLaunchKernel",
        "cuLaunchKernel",
    ):
        assert is_launch_call(name), name
    for name in (
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpyWithStream",
        "hipMemcpy",
        "cudaStreamSynchronize",
    ):
        assert is_sync_call(name), name
    for name in ("hipMemcpyAsync", "hipMemsetAsync", "hipLaunchKernel", "hipGetDevice"):
        assert not is_sync_call(name), name
    assert is_copy_call("hipMemcpyWithStream") and is_copy_call("hipMemcpyAsync")
    assert is_copy_call("cudaMemsetAsync") and not is_copy_call("hipLaunchKernel")
    assert not is_launch_call("hipGetDevicePropertiesR0600")


def test_amd_device_is_not_read_as_a_compute_capability() -> None:
    mi250 = {
        "id": 0,
        "name": "AMD Radeon Graphics",
        "totalGlobalMem": 68702699520,
        "computeMajor": 9,
        "computeMinor": 0,
        "warpSize": 64,
        "numSms": 104,
    }
    dev = parse_device(mi250)
    assert dev.vendor == "AMD" and dev.compute_capability is None
    assert dev.gfx_version == (9, 0) and dev.memory_bytes == 68702699520
    assert dev.sm_count == 104 and dev.arch == "gfx90*"
    named = parse_device({**mi250, "gcnArchName": "gfx90a:sramecc+:xnack-"})
    assert named.gfx_arch == "gfx90a" and named.arch == "gfx90a"
    h100 = parse_device(
        {"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "warpSize": 32}
    )
    assert h100.vendor == "NVIDIA" and h100.compute_capability == (9, 0)
    assert h100.arch == "sm_90" and h100.gfx_version is None
    old = parse_device({"name": "Tesla V100-DGXS-32GB", "major": 7, "minor": 0})
    assert old.compute_capability == (7, 0)
    assert parse_device({"name": 5, "computeMajor": "x"}).vendor is None
    kernel = "Cijk_Alik_Bljk_SB_Bias_MT64x16x32_ISA90a_IU1_K1"
    assert gfx_arch_from_kernels(["void at::native::k", kernel]) == "gfx90a"


def test_distributed_info_is_typed() -> None:
    info = parse_distributed(
        {"backend": "nccl", "rank": 0, "world_size": 2, "pg_count": 1, "nccl_version": "2.17.1"}
    )
    assert info is not None
    assert (info.rank, info.world_size, info.backend) == (0, 2, "nccl")
    assert info.nccl_version == "2.17.1" and info.pg_count == 1
    assert parse_distributed({"rank": 0}).world_size is None  # type: ignore[union-attr]
    assert parse_distributed(None) is None and parse_distributed([1]) is None  # type: ignore[arg-type]


def _events_doc(n: int) -> dict[str, Any]:
    events = []
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i % 7}}}, {{x",
                "ts": i * 10 + 0.5,
                "dur": 3,
                "pid": 1,
                "tid": 1 + i % 3,
                "args": {
                    "External id": i,
                    "nested": [{"a": 1}, {"b": {"c": 2}}],
                    "Input Dims": [[2, 3], [3, 4]],
                    "Input type": ["float"],
                },
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 5}",
                "ts": i * 10 + 2,
                "dur": 1.25,
                "pid": 0,
                "tid": 7,
                "args": {"correlation": i},
            }
        )
    return {
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0}
        ],
        "traceEvents": events,
        "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 4},
    }


def _rows(ev: Any, table_name: str) -> list[tuple[Any, ...]]:
    table = getattr(ev, table_name)
    keys = sorted(table.extra)
    # NaN (no bytes) compares unequal to itself: compare it as None.
    cols = [[None if v != v else v for v in table.extra[k].tolist()] for k in keys]
    return sorted(
        zip(
            _names(ev, table),
            table.ts.tolist(),
            table.dur.tolist(),
            [ev.threads[c] for c in table.tid.tolist()],
            *cols,
            strict=True,
        ),
        key=repr,
    )


_TABLES = ("cpu_ops", "annotations", "python", "gpu", "runtime", "gpu_annotations")


def _same(a: Any, b: Any) -> None:
    for name in _TABLES:
        assert _rows(a, name) == _rows(b, name), name
    assert a.device_properties == b.device_properties
    assert a.distributed == b.distributed


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("packed", [False, True])
def test_chunked_decode_matches_whole_file_decode(
    tmp_path: Path, indent: int | None, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Names hold "}, {" and args hold nested objects: cut candidates that must be refused.
    text = json.dumps(_events_doc(300), indent=indent).encode()
    path = tmp_path / ("t.json.gz" if packed else "t.json")
    path.write_bytes(gzip.compress(text) if packed else text)
    whole = parse_trace(path)
    assert len(whole.cpu_ops) == 300 and len(whole.gpu) == 300
    pieces: list[int] = []
    add = EventBuilder.add
    monkeypatch.setattr(
        EventBuilder, "add", lambda self, evs: (pieces.append(len(evs)), add(self, evs))[1]
    )
    parse_trace(path, chunk_bytes=4096)
    assert len(pieces) > 10 and sum(pieces) == 600  # it was cut, and nothing was lost
    monkeypatch.undo()
    for chunk in (97, 1000, 4096):
        _same(whole, parse_trace(path, chunk_bytes=chunk))
    assert whole.distributed_info is not None and whole.distributed_info.world_size == 4
    shapes = parse_trace(path, chunk_bytes=1000).shapes
    assert len(shapes) == len(whole.shapes)


def test_bare_array_form_is_chunked_too(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps(_events_doc(50)["traceEvents"], indent=2))
    _same(parse_trace(path), parse_trace(path, chunk_bytes=200))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"displayTimeUnit": "ms"}', "no traceEvents"),
        (b"[]", "no events"),
        (b'{"traceEvents": [{"ph": "X", "name": "a\xff\xfe"}]}', "corrupt"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1e999}]}', "corrupt"),
        (b'{"traceEvents": {"ph": "X"}}', "corrupt"),
        (b"\x1f\x8b\x08\x00garbage", "cannot read"),
    ],
)
def test_unusable_traces_say_so_in_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(CorruptArtifact, match=message) as err:
        parse_trace(path)
    assert "\n" not in str(err.value) and "bad.json" in str(err.value)


def test_out_of_range_ids_are_treated_as_absent(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "a",
                "ts": 1,
                "dur": 1,
                "pid": 1,
                "tid": 1,
                "args": {"External id": -(2**64)},
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "b",
                "ts": 2,
                "dur": 1,
                "pid": 1,
                "tid": 1,
                "args": {"External id": 3},
            },
        ]
    }
    ev = parse_trace(_write(tmp_path, doc))
    assert sorted(ev.cpu_ops.col("external_id").tolist()) == [-1, 3]


def test_kernel_without_runtime_events_is_summarised(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text('{"traceEvents":[{"ph":"X","cat":"kernel"}]}')
    summary = summarize_trace(parse_trace(path))
    assert summary.gpu is not None and summary.gpu.kernel_launches_per_step is None


def test_gzip_members_padding_and_truncation(tmp_path: Path) -> None:
    text = json.dumps(_events_doc(200), indent=1).encode()
    half = len(text) // 2
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    multi = tmp_path / "m.json.gz"
    # Two gzip members (as `cat a.gz b.gz` makes) and zero padding after them.
    multi.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\0" * 64)
    _same(parse_trace(plain), parse_trace(multi, chunk_bytes=2048))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:-20])
    with pytest.raises(CorruptArtifact, match="cannot read trace"):
        parse_trace(cut, chunk_bytes=2048)
    bad = bytearray(gzip.compress(text))
    bad[-6] ^= 0xFF  # the CRC no longer matches
    flipped = tmp_path / "crc.json.gz"
    flipped.write_bytes(bytes(bad))
    with pytest.raises(CorruptArtifact):
        parse_trace(flipped)
