"""Kineto / Chrome trace JSON (.json or .json.gz) -> compact per-category event arrays.

Speed and memory are the point (issue 7: a 200 MB trace in <= 3 s, <= 1 GB RSS on two
cores; `json.load` alone takes 6.8 s and 0.9 GB on 170 MB). So the file is decoded by
msgspec into typed structs that declare only the fields the analysis reads (unknown keys are
skipped by the decoder without building objects), the record_shapes payloads ("Input type",
"Input Dims") stay undecoded `msgspec.Raw` slices until an op that needs them is found, and
each category of interest becomes a handful of numpy arrays instead of a dict per event.

Format notes (shared/mechanics.md 6.2-6.4): `ts`/`dur` are microseconds, floats with ns
precision since kineto 2024 and integers before; `pid`/`tid` are ints, or strings for the
profiler's own rows ("Spans", "Traces"); categories other than the ones below are ignored.
"""

from __future__ import annotations

import gzip
import logging
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from perfdoctor.analyze.op_names import CONV_OPS, MATMUL_OPS
from perfdoctor.errors import CorruptArtifact

log = logging.getLogger(__name__)

# Kineto's `_activityTypeNames`; these are the categories the analysis reads.
CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
PYTHON_FUNCTION = "python_function"
KERNEL = "kernel"
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"

GPU_KIND_KERNEL, GPU_KIND_MEMCPY, GPU_KIND_MEMSET = 0, 1, 2
_GPU_KINDS = {KERNEL: GPU_KIND_KERNEL, GPU_MEMCPY: GPU_KIND_MEMCPY, GPU_MEMSET: GPU_KIND_MEMSET}

# Ops whose record_shapes payload is decoded: GEMMs and convolutions (precision, alignment).
SHAPE_OPS = CONV_OPS | MATMUL_OPS

_MISSING = -1
_NO_RAW = msgspec.Raw(b"")
_Id = int | float | str | None  # ids are ints in practice; anything else is treated as absent


class _Args(msgspec.Struct, gc=False):
    external_id: _Id = msgspec.field(default=None, name="External id")
    correlation: _Id = None
    python_id: _Id = msgspec.field(default=None, name="Python id")
    python_parent_id: _Id = msgspec.field(default=None, name="Python parent id")
    # Raw: kept as an undecoded slice; empty when the key is absent.
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    bytes: int | float | str | None = None
    device: _Id = None
    stream: _Id = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str | None = None
    tid: int | str | None = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    # Field names are the trace's own keys.
    traceEvents: list[_Event] = []
    deviceProperties: list[dict[str, Any]] = []
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: int | None = None


_DECODER = msgspec.json.Decoder(_TraceFile | list[_Event])
_SHAPE_DECODER = msgspec.json.Decoder(list[Any])


@dataclass(frozen=True)
class Table:
    """Events of one kind as parallel arrays (row i of every column is one event)."""

    name: np.ndarray  # int32 codes into TraceEvents.names
    ts: np.ndarray  # float64 microseconds
    dur: np.ndarray  # float64 microseconds
    tid: np.ndarray  # int64 codes of (pid, tid): a CPU thread, or a device's stream
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def col(self, key: str) -> np.ndarray:
        return self.extra[key]


@dataclass(frozen=True)
class TraceEvents:
    """A parsed trace: string table + one Table per category group."""

    path: str
    names: tuple[str, ...]
    cpu_ops: Table  # extra: external_id
    annotations: Table  # user_annotation (ProfilerStep#N, Optimizer.step#..., DataLoader)
    python: Table  # extra: py_id, py_parent
    gpu: Table  # kernel/memcpy/memset; extra: device, kind, correlation, bytes
    runtime: Table  # cuda_runtime + cuda_driver; extra: correlation, external_id, driver
    shapes: dict[int, tuple[list[Any], list[Any]]]  # cpu_ops row -> (Input type, Input Dims)
    device_properties: tuple[dict[str, Any], ...] = ()
    distributed: dict[str, Any] | None = None

    def name_codes(self, predicate: Any) -> np.ndarray:
        """Codes of every name for which predicate(name) is true (a small table)."""
        return np.fromiter((i for i, n in enumerate(self.names) if predicate(n)), dtype=np.int32)

    def code_mask(self, predicate: Any) -> np.ndarray:
        """Boolean lookup table over name codes: mask[codes] selects matching rows."""
        mask = np.zeros(len(self.names) + 1, dtype=bool)
        mask[self.name_codes(predicate)] = True
        return mask


def read_trace_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
            return gzip.decompress(raw)
        return raw
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise CorruptArtifact(f"cannot read trace {path}: {err}") from err


def parse_trace(path: Path) -> TraceEvents:
    """Decode a trace file; a file that is not a trace raises CorruptArtifact."""
    data = read_trace_bytes(path)
    try:
        decoded = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise CorruptArtifact(f"corrupt trace {path}: {err}") from err
    # The Raw shape payloads reference `data`, so the buffer lives until build_events has
    # decoded the few it needs and the structs are dropped.
    del data
    if isinstance(decoded, list):
        return build_events(str(path), decoded)
    return build_events(
        str(path),
        decoded.traceEvents,
        device_properties=tuple(decoded.deviceProperties),
        distributed=decoded.distributedInfo,
    )


class _Codes:
    """Interns strings (names, thread ids) into dense integer codes."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}

    def codes(self, values: Any) -> np.ndarray:
        index = self.index
        setdefault = index.setdefault
        # A bound setdefault in a comprehension is the cheapest interning loop in CPython.
        return np.fromiter((setdefault(v, len(index)) for v in values), dtype=np.int64)


def _ids(values: Sequence[Any]) -> np.ndarray:
    return np.fromiter(
        (v if type(v) is int else _MISSING for v in values), dtype=np.int64, count=len(values)
    )


def _table(events: list[_Event], names: _Codes, tids: _Codes) -> Table:
    n = len(events)
    return Table(
        name=names.codes(e.name for e in events).astype(np.int32),
        ts=np.fromiter((e.ts for e in events), dtype=np.float64, count=n),
        dur=np.fromiter((e.dur for e in events), dtype=np.float64, count=n),
        tid=tids.codes((e.pid, e.tid) for e in events),
    )


def _args_of(events: list[_Event]) -> list[_Args]:
    empty = _Args()
    return [e.args if e.args is not None else empty for e in events]


def build_events(
    path: str,
    events: list[_Event],
    *,
    device_properties: tuple[dict[str, Any], ...] = (),
    distributed: dict[str, Any] | None = None,
) -> TraceEvents:
    groups: dict[str, list[_Event]] = defaultdict(list)
    for ev in events:
        if ev.ph == "X":
            groups[ev.cat].append(ev)
    names = _Codes()
    tids = _Codes()

    cpu_events = groups.get(CPU_OP, [])
    cpu = _table(cpu_events, names, tids)
    cpu_args = _args_of(cpu_events)
    cpu.extra["external_id"] = _ids([a.external_id for a in cpu_args])
    shapes: dict[int, tuple[list[Any], list[Any]]] = {}
    if cpu_events:
        shape_codes = {names.index[n] for n in SHAPE_OPS if n in names.index}
        for row in np.flatnonzero(np.isin(cpu.name, list(shape_codes))).tolist():
            types, dims = _decode_shapes(cpu_args[row])
            if types or dims:
                shapes[row] = (types, dims)

    annotations = _table(groups.get(USER_ANNOTATION, []), names, tids)

    py_events = groups.get(PYTHON_FUNCTION, [])
    python = _table(py_events, names, tids)
    py_args = _args_of(py_events)
    python.extra["py_id"] = _ids([a.python_id for a in py_args])
    python.extra["py_parent"] = _ids([a.python_parent_id for a in py_args])

    gpu_events = [ev for cat in (KERNEL, GPU_MEMCPY, GPU_MEMSET) for ev in groups.get(cat, [])]
    gpu = _table(gpu_events, names, tids)
    gpu_args = _args_of(gpu_events)
    gpu.extra["kind"] = np.fromiter(
        (_GPU_KINDS[e.cat] for e in gpu_events), dtype=np.int8, count=len(gpu_events)
    )
    gpu.extra["correlation"] = _ids([a.correlation for a in gpu_args])
    # The GPU row's own pid is the device; args.device says the same where present.
    gpu.extra["device"] = _ids(
        [
            a.device if type(a.device) is int else e.pid
            for a, e in zip(gpu_args, gpu_events, strict=True)
        ]
    )
    gpu.extra["stream"] = _ids(
        [
            a.stream if type(a.stream) is int else e.tid
            for a, e in zip(gpu_args, gpu_events, strict=True)
        ]
    )
    gpu.extra["bytes"] = np.fromiter(
        (float(a.bytes) if isinstance(a.bytes, (int, float)) else np.nan for a in gpu_args),
        dtype=np.float64,
        count=len(gpu_args),
    )

    rt_events = groups.get(CUDA_RUNTIME, []) + groups.get(CUDA_DRIVER, [])
    runtime = _table(rt_events, names, tids)
    rt_args = _args_of(rt_events)
    runtime.extra["correlation"] = _ids([a.correlation for a in rt_args])
    runtime.extra["external_id"] = _ids([a.external_id for a in rt_args])
    runtime.extra["driver"] = np.fromiter(
        (e.cat == CUDA_DRIVER for e in rt_events), dtype=bool, count=len(rt_events)
    )

    ordered = [""] * len(names.index)
    for text, code in names.index.items():
        ordered[code] = text
    return TraceEvents(
        path=path,
        names=tuple(ordered),
        cpu_ops=cpu,
        annotations=annotations,
        python=python,
        gpu=gpu,
        runtime=runtime,
        shapes=shapes,
        device_properties=device_properties,
        distributed=distributed,
    )


def _decode_shapes(args: _Args) -> tuple[list[Any], list[Any]]:
    types: list[Any] = []
    dims: list[Any] = []
    try:
        if len(args.input_type):
            types = _SHAPE_DECODER.decode(args.input_type)
        if len(args.input_dims):
            dims = _SHAPE_DECODER.decode(args.input_dims)
    except (msgspec.DecodeError, msgspec.ValidationError):
        # A malformed shapes payload only costs the precision facts of this one op.
        log.debug("undecodable record_shapes payload")
    return types, dims
