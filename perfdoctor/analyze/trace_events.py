"""Kineto / Chrome trace JSON (.json or .json.gz) -> compact per-category event arrays.

Speed and memory are the point (issue 11 item 7: a 200 MB trace analysed in <= 3 s, a 2 GB
one in < 2 GB RSS, on two cores). The file is decoded by msgspec into typed structs that
declare only the fields the analysis reads (unknown keys are skipped without building
objects); the record_shapes payloads ("Input type", "Input Dims") stay undecoded
`msgspec.Raw` slices until an op that needs them is found; each category of interest becomes
a handful of numpy arrays instead of a dict per event. Big files are streamed
(trace_stream.py): the `traceEvents` array is cut into chunks at event boundaries and each
chunk is decoded and turned into columns before the next is read, so the peak is one chunk
plus the columns, not the whole decoded file.

Format variants (shared/mechanics.md 6.2-6.4, and the real traces of the GPU corpus):
`ts`/`dur` are microseconds, floats with ns precision since kineto 2024 and integers before;
a complete event without `dur` lasts 0; 'B'/'E' pairs become complete events; `pid`/`tid`
are ints, or strings for the profiler's own rows ("Spans", "Traces") and in 2021-era traces.
2021-era traces name the categories `Operator`, `Kernel`, `Runtime`, `Memcpy`, `Memset`,
`Python function` and spell "external id" in lower case; record_function spans
(ProfilerStep#N, enumerate(DataLoader)#..., Optimizer.step#...) then sit under `Operator`
and are moved to the annotations table, where current kineto puts them. ROCm traces use the
current names with hip* runtime calls. Flow events (`ph` s/f: ac2g, async, ...) carry the
correlation id and fill it in where a GPU op or runtime call lacks it.
"""

from __future__ import annotations

import gzip
import logging
import math
import re
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np

from perfdoctor.analyze.op_names import (
    ATTENTION_OPS,
    CONV_OPS,
    EMBEDDING_OPS,
    GROUPED_MM_OPS,
    MATMUL_OPS,
)
from perfdoctor.analyze.trace_meta import (
    DeviceInfo,
    DistributedInfo,
    parse_device_properties,
    parse_distributed,
)
from perfdoctor.errors import CorruptArtifact

log = logging.getLogger(__name__)

# Kineto's `_activityTypeNames`; these are the categories the analysis reads.
CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
GPU_USER_ANNOTATION = "gpu_user_annotation"
PYTHON_FUNCTION = "python_function"
KERNEL = "kernel"
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"
CUDA_PROFILER_RANGE = "cuda_profiler_range"

# Every spelling seen in real traces -> the current name. 2021-era kineto (torch 1.8-1.9)
# wrote the capitalised names; "Python function" is older still.
CATEGORY_ALIASES: dict[str, str] = {
    CPU_OP: CPU_OP,
    "Operator": CPU_OP,
    "operator": CPU_OP,
    USER_ANNOTATION: USER_ANNOTATION,
    GPU_USER_ANNOTATION: GPU_USER_ANNOTATION,
    PYTHON_FUNCTION: PYTHON_FUNCTION,
    "Python function": PYTHON_FUNCTION,
    KERNEL: KERNEL,
    "Kernel": KERNEL,
    GPU_MEMCPY: GPU_MEMCPY,
    "Memcpy": GPU_MEMCPY,
    GPU_MEMSET: GPU_MEMSET,
    "Memset": GPU_MEMSET,
    CUDA_RUNTIME: CUDA_RUNTIME,
    "Runtime": CUDA_RUNTIME,
    CUDA_DRIVER: CUDA_DRIVER,
    "Driver": CUDA_DRIVER,
}
# The same, matched case-, space- and underscore-blind ("Python Function", "PYTHON_FUNCTION"
# as other writers and ROCm builds spell them): an MI300X report said "the trace has no
# Python frames" beside 6,649 of them.
_LOOSE_ALIASES = {re.sub(r"[^a-z]", "", k.lower()): v for k, v in CATEGORY_ALIASES.items()}


def canonical_category(cat: str) -> str | None:
    """The current kineto name of a trace category, under any spelling seen; None for a
    category the analysis does not read."""
    exact = CATEGORY_ALIASES.get(cat)
    if exact is not None:
        return exact
    return _LOOSE_ALIASES.get(re.sub(r"[^a-z]", "", cat.lower())) if cat else None


# record_function spans that current kineto files under user_annotation and 2021-era kineto
# under Operator.
ANNOTATION_PREFIXES = (
    "ProfilerStep#",
    "enumerate(DataLoader)#",
    "enumerate(DataPipe)#",
    "Optimizer.step#",
    "Optimizer.zero_grad#",
)
# Flow categories that link a CPU call to the GPU op it issued (the flow id is the
# correlation id); "fwdbwd" links forward to backward ops and is not one of them.
LAUNCH_FLOW_CATEGORIES = frozenset({"ac2g", "async", "async_cpu_to_gpu", "async_gpu"})

GPU_KIND_KERNEL, GPU_KIND_MEMCPY, GPU_KIND_MEMSET = 0, 1, 2
_GPU_KINDS = {KERNEL: GPU_KIND_KERNEL, GPU_MEMCPY: GPU_KIND_MEMCPY, GPU_MEMSET: GPU_KIND_MEMSET}

# Ops whose record_shapes payload is decoded: GEMMs and convolutions (precision, alignment).
# Attention and grouped GEMMs: their FLOPs (op_flops.py). Embeddings: their vocabulary.
SHAPE_OPS = CONV_OPS | MATMUL_OPS | ATTENTION_OPS | GROUPED_MM_OPS | EMBEDDING_OPS

_MISSING = -1
_NO_RAW = msgspec.Raw(b"")
_Id = int | float | str | None  # ids are ints in practice; anything else is treated as absent
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _Args(msgspec.Struct, gc=False):
    external_id: _Id = msgspec.field(default=None, name="External id")
    external_id_2021: _Id = msgspec.field(default=None, name="external id")
    correlation: _Id = None
    python_id: _Id = msgspec.field(default=None, name="Python id")
    python_parent_id: _Id = msgspec.field(default=None, name="Python parent id")
    # Raw: kept as an undecoded slice; empty when the key is absent.
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    concrete: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    bytes: int | float | str | None = None
    device: _Id = None
    stream: _Id = None
    # What record_param_comms (torch >= 2.1) and, since 2.2, the NCCL kernels themselves
    # record of a collective: its name, message sizes, group size and element type.
    collective_name: Any = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None


class CommArgs(NamedTuple):
    """A collective's recorded parameters (None where the trace does not say)."""

    collective: str | None
    in_nelems: int | None
    out_nelems: int | None
    group_size: int | None
    dtype: str | None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0  # absent on instant events and on some writers' complete events
    pid: int | str | None = None
    tid: int | str | None = None
    id: _Id = None  # flow events
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    # Field names are the trace's own keys. None: the key is absent.
    traceEvents: list[_Event] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    computeProperties: list[dict[str, Any]] | None = None  # 2021-era name
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: int | float | None = None


TRACE_DECODER = msgspec.json.Decoder(_TraceFile | list[_Event])
EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_SHAPE_DECODER = msgspec.json.Decoder(list[Any])
# What a decode of a trace can raise on bad input: msgspec's errors, and UnicodeDecodeError
# for invalid UTF-8 inside a string.
# RecursionError: JSON nested deeper than the decoder's limit (a 2 KB file can be).
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


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

    @cached_property
    def end(self) -> np.ndarray:
        # Computed once: callers index it row by row (`table.end[row]`), and recomputing a
        # whole column per row made those loops O(rows x events).
        return self.ts + self.dur

    def col(self, key: str) -> np.ndarray:
        return self.extra[key]


def empty_table(*extras: str) -> Table:
    return Table(
        name=np.empty(0, dtype=np.int32),
        ts=np.empty(0),
        dur=np.empty(0),
        tid=np.empty(0, dtype=np.int64),
        extra={k: np.empty(0, dtype=np.int64) for k in extras},
    )


@dataclass(frozen=True)
class TraceEvents:
    """A parsed trace: string table + one Table per category group."""

    path: str
    names: tuple[str, ...]
    cpu_ops: Table  # cpu_op / Operator; extra: external_id
    # user_annotation (ProfilerStep#N, Optimizer.step#..., DataLoader), and the same
    # record_function spans of 2021-era traces found under Operator
    annotations: Table
    python: Table  # python_function; extra: py_id, py_parent
    # kernel/memcpy/memset; extra: device, stream, kind, correlation, external_id, bytes
    gpu: Table
    # cuda_runtime + cuda_driver (hip* calls on ROCm); extra: correlation, external_id, driver
    runtime: Table
    shapes: dict[int, tuple[list[Any], list[Any]]]  # cpu_ops row -> (Input type, Input Dims)
    # cpu_ops row -> "Concrete Inputs" (scalars as strings: stride, is_causal) of SHAPE_OPS
    concrete: dict[int, list[Any]] = field(default_factory=dict)
    device_properties: tuple[dict[str, Any], ...] = ()  # deviceProperties / computeProperties
    distributed: dict[str, Any] | None = None  # distributedInfo as written
    # gpu_user_annotation: record_function spans on the GPU timeline (pid = device,
    # tid = stream); extra: device, stream, external_id
    gpu_annotations: Table = field(
        default_factory=lambda: empty_table("device", "stream", "external_id")
    )
    # thread code -> (pid, tid) as written in the trace
    threads: tuple[tuple[Any, Any], ...] = ()
    base_time_ns: int | float | None = None  # baseTimeNanoseconds
    # cpu_ops / gpu row -> the collective's recorded parameters, for the rows that have them
    comm_cpu: dict[int, CommArgs] = field(default_factory=dict)
    comm_gpu: dict[int, CommArgs] = field(default_factory=dict)
    # Kernels recorded by CUPTI's range profiler (per-kernel counters, experimental_config
    # profiler_metrics) instead of as kernel activities: a trace with no kernel timeline.
    profiler_range_count: int = 0
    # Collective ops / kernels whose recorded message size or group size is impossible (a
    # negative group, 10**30 elements, "²"): ignored as invalid input, counted for a note.
    invalid_comm_args: int = 0
    # GEMM / convolution ops whose `Input Dims` hold a tensor no device can hold (a negative
    # dimension, more than MAX_TENSOR_ELEMENTS elements): their shapes are dropped.
    invalid_shapes: int = 0

    def name_codes(self, predicate: Any) -> np.ndarray:
        """Codes of every name for which predicate(name) is true (a small table)."""
        return np.fromiter((i for i, n in enumerate(self.names) if predicate(n)), dtype=np.int32)

    def code_mask(self, predicate: Any) -> np.ndarray:
        """Boolean lookup table over name codes: mask[codes] selects matching rows."""
        mask = np.zeros(len(self.names) + 1, dtype=bool)
        mask[self.name_codes(predicate)] = True
        return mask

    @property
    def devices(self) -> tuple[DeviceInfo, ...]:
        """The GPUs of deviceProperties, parsed (vendor, name, memory, cc or gfx arch)."""
        return parse_device_properties(self.device_properties)

    @property
    def distributed_info(self) -> DistributedInfo | None:
        """rank / world_size / backend of distributedInfo (None without it)."""
        return parse_distributed(self.distributed)


def read_trace_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
            return gzip.decompress(raw)
        return raw
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise CorruptArtifact(f"cannot read trace {path}: {err}") from err


def parse_trace(path: Path, chunk_bytes: int | None = None) -> TraceEvents:
    """Decode a trace file; a file that is not a usable trace raises CorruptArtifact.

    chunk_bytes: size of the decoded pieces of a big file (tests use small ones).
    """
    from perfdoctor.analyze.trace_stream import stream_trace

    builder = EventBuilder(str(path))
    stream_trace(path, builder, chunk_bytes=chunk_bytes)
    return builder.finish()


def build_events(
    path: str,
    events: list[_Event],
    *,
    device_properties: tuple[dict[str, Any], ...] = (),
    distributed: dict[str, Any] | None = None,
) -> TraceEvents:
    """TraceEvents of already decoded events (one chunk)."""
    builder = EventBuilder(path)
    builder.add(events)
    builder.device_properties = device_properties
    builder.distributed = distributed
    return builder.finish(require_events=False)


class _Codes:
    """Interns strings (names, thread ids) into dense integer codes."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.chars = 0  # total length of the interned strings (trace_budget.py)

    def codes(self, values: Any) -> np.ndarray:
        index = self.index
        setdefault = index.setdefault
        before = len(index)
        # A bound setdefault in a comprehension is the cheapest interning loop in CPython.
        out = np.fromiter((setdefault(v, len(index)) for v in values), dtype=np.int64)
        if len(index) > before:
            added = islice(reversed(index), len(index) - before)
            self.chars += sum(len(v) for v in added if isinstance(v, str))
        return out

    def ordered(self) -> list[Any]:
        out: list[Any] = [None] * len(self.index)
        for value, code in self.index.items():
            out[code] = value
        return out


def _ids(values: Sequence[Any]) -> np.ndarray:
    try:
        return np.fromiter(
            (v if type(v) is int else _MISSING for v in values), dtype=np.int64, count=len(values)
        )
    except OverflowError:
        # An id outside int64 cannot be a real kineto id: treat it as absent.
        return np.fromiter(
            (v if type(v) is int and _INT64_MIN <= v <= _INT64_MAX else _MISSING for v in values),
            dtype=np.int64,
            count=len(values),
        )


def _args_of(events: list[_Event]) -> list[_Args]:
    empty = _Args()
    return [e.args if e.args is not None else empty for e in events]


class _Columns:
    """The column pieces of one table, one per decoded chunk, joined by finish()."""

    def __init__(self, *extras: str) -> None:
        self.parts: dict[str, list[np.ndarray]] = defaultdict(list)
        self.extras = extras
        self.rows = 0
        self.nbytes = 0  # of every part so far (trace_budget.py), kept as they are added

    def add(self, events: list[_Event], names: _Codes, tids: _Codes, **extra: np.ndarray) -> None:
        n = len(events)
        parts = self.parts
        parts["name"].append(names.codes(e.name for e in events).astype(np.int32))
        parts["ts"].append(np.fromiter((e.ts for e in events), dtype=np.float64, count=n))
        parts["dur"].append(np.fromiter((e.dur for e in events), dtype=np.float64, count=n))
        parts["tid"].append(tids.codes((e.pid, e.tid) for e in events))
        for key, values in extra.items():
            parts[key].append(values)
        self.nbytes += sum(parts[key][-1].nbytes for key in ("name", "ts", "dur", "tid", *extra))
        self.rows += n

    def table(self) -> Table:
        def join(key: str, dtype: Any) -> np.ndarray:
            pieces = self.parts.pop(key, [])
            if not pieces:
                return np.empty(0, dtype=dtype)
            return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

        base = Table(
            name=join("name", np.int32),
            ts=join("ts", np.float64),
            dur=join("dur", np.float64),
            tid=join("tid", np.int64),
        )
        for key in self.extras:
            base.extra[key] = join(key, np.int64)
        return base


class EventBuilder:
    """Turns decoded chunks of events into the TraceEvents columns, chunk by chunk."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names = _Codes()
        self.tids = _Codes()
        self.cpu = _Columns("external_id")
        self.annotations = _Columns()
        self.gpu_annotations = _Columns("device", "stream", "external_id")
        self.python = _Columns("py_id", "py_parent")
        self.gpu = _Columns("kind", "correlation", "external_id", "device", "stream", "bytes")
        self.runtime = _Columns("correlation", "external_id", "driver")
        self.flows = _Columns("flow_id", "flow_start")
        self.need_flows = False
        self.shapes: dict[int, tuple[list[Any], list[Any]]] = {}
        self.comm_cpu: dict[int, CommArgs] = {}
        self.comm_gpu: dict[int, CommArgs] = {}
        self.invalid_comm = 0  # collectives' args out of any collective's range (ignored)
        self.invalid_shapes = 0  # ops whose recorded shapes no tensor can have (ignored)
        self.concrete: dict[int, list[Any]] = {}
        self.open_spans: dict[tuple[Any, Any], list[_Event]] = defaultdict(list)
        self.events_seen = 0
        self.profiler_ranges = 0  # cuda_profiler_range: CUPTI range-profiler (counter) mode
        self.device_properties: tuple[dict[str, Any], ...] = ()
        self.distributed: dict[str, Any] | None = None
        self.base_time_ns: int | float | None = None

    def all_columns(self) -> tuple[_Columns, ...]:
        return (
            self.cpu,
            self.annotations,
            self.gpu_annotations,
            self.python,
            self.gpu,
            self.runtime,
            self.flows,
        )

    @property
    def names_bytes(self) -> int:
        return self.names.chars

    def set_metadata(self, doc: _TraceFile) -> None:
        props = doc.deviceProperties if doc.deviceProperties else doc.computeProperties
        self.device_properties = tuple(p for p in props or () if isinstance(p, dict))
        self.distributed = doc.distributedInfo
        self.base_time_ns = doc.baseTimeNanoseconds

    def add(self, events: list[_Event]) -> None:
        self.events_seen += len(events)
        groups: dict[str, list[_Event]] = defaultdict(list)
        flows: list[_Event] = []
        paired: list[_Event] = []
        for ev in events:
            ph = ev.ph
            if ph == "X":
                groups[ev.cat].append(ev)
            elif ph == "s" or ph == "f":
                flows.append(ev)
            elif ph == "B" or ph == "E":
                paired.append(ev)
        if paired:
            for ev in self._pair(paired):
                groups[ev.cat].append(ev)
        self.profiler_ranges += len(groups.get(CUDA_PROFILER_RANGE, ()))
        canon: dict[str, list[_Event]] = defaultdict(list)
        old_ops: list[_Event] = []
        for cat, evs in groups.items():
            name = canonical_category(cat)
            if name is None and not cat:
                # Frames written without a category still carry their Python id.
                frames = [e for e in evs if e.args is not None and e.args.python_id is not None]
                canon[PYTHON_FUNCTION].extend(frames)
                continue
            if name == CPU_OP and cat != CPU_OP:
                old_ops.extend(evs)
            elif name is not None:
                canon[name].extend(evs)
        if old_ops:
            for ev in old_ops:
                target = USER_ANNOTATION if ev.name.startswith(ANNOTATION_PREFIXES) else CPU_OP
                canon[target].append(ev)
        self._add_cpu(canon.get(CPU_OP, []))
        self.annotations.add(canon.get(USER_ANNOTATION, []), self.names, self.tids)
        self._add_gpu_annotations(canon.get(GPU_USER_ANNOTATION, []))
        self._add_python(canon.get(PYTHON_FUNCTION, []))
        self._add_gpu([ev for cat in (KERNEL, GPU_MEMCPY, GPU_MEMSET) for ev in canon.get(cat, [])])
        self._add_runtime(canon.get(CUDA_RUNTIME, []), canon.get(CUDA_DRIVER, []))
        self._add_flows(flows)

    def _pair(self, events: list[_Event]) -> Iterable[_Event]:
        """'B'/'E' duration events -> complete events (an 'E' closes the innermost open 'B'
        of its thread; unmatched ones are dropped)."""
        for ev in events:
            stack = self.open_spans[(ev.pid, ev.tid)]
            if ev.ph == "B":
                # Kept past this chunk, whose buffer is reused: no undecoded slices of it.
                if ev.args is not None:
                    ev.args = msgspec.structs.replace(
                        ev.args, input_type=_NO_RAW, input_dims=_NO_RAW, concrete=_NO_RAW
                    )
                stack.append(ev)
            elif stack:
                begin = stack.pop()
                yield _Event(
                    ph="X",
                    cat=begin.cat or ev.cat,
                    name=begin.name or ev.name,
                    ts=begin.ts,
                    dur=max(ev.ts - begin.ts, 0.0),
                    pid=begin.pid,
                    tid=begin.tid,
                    args=begin.args if begin.args is not None else ev.args,
                )

    def _add_cpu(self, events: list[_Event]) -> None:
        offset = self.cpu.rows
        args = _args_of(events)
        self.cpu.add(events, self.names, self.tids, external_id=_external_ids(args))
        if not events:
            return
        self.invalid_comm += _collect_comm(args, offset, self.comm_cpu)
        index = self.names.index
        shape_codes = [index[n] for n in SHAPE_OPS if n in index]
        if not shape_codes:
            return
        codes = self.cpu.parts["name"][-1]
        for row in np.flatnonzero(np.isin(codes, shape_codes)).tolist():
            types, dims = _decode_shapes(args[row])
            if dims and not plausible_dims(dims):
                self.invalid_shapes += 1
                dims = []  # no FLOPs from a tensor no device could hold (1e12 x 1e12)
            if types or dims:
                self.shapes[offset + row] = (types, dims)
            concrete = _decode_concrete(args[row])
            if concrete:
                self.concrete[offset + row] = concrete

    def _add_gpu_annotations(self, events: list[_Event]) -> None:
        args = _args_of(events)
        self.gpu_annotations.add(
            events,
            self.names,
            self.tids,
            device=_device_ids(args, events),
            stream=_stream_ids(args, events),
            external_id=_external_ids(args),
        )

    def _add_python(self, events: list[_Event]) -> None:
        args = _args_of(events)
        self.python.add(
            events,
            self.names,
            self.tids,
            py_id=_ids([a.python_id for a in args]),
            py_parent=_ids([a.python_parent_id for a in args]),
        )

    def _add_gpu(self, events: list[_Event]) -> None:
        args = _args_of(events)
        n = len(events)
        self.invalid_comm += _collect_comm(args, self.gpu.rows, self.comm_gpu)
        self.gpu.add(
            events,
            self.names,
            self.tids,
            kind=np.fromiter(
                (_GPU_KINDS[canonical_category(e.cat) or KERNEL] for e in events),
                dtype=np.int8,
                count=n,
            ),
            correlation=_ids([a.correlation for a in args]),
            external_id=_external_ids(args),
            # The GPU row's own pid is the device; args.device says the same where present.
            device=_device_ids(args, events),
            stream=_stream_ids(args, events),
            # Kernels record no bytes: None is the common value, tested first.
            bytes=np.fromiter(
                (np.nan if a.bytes is None else _finite(a.bytes) for a in args),
                dtype=np.float64,
                count=n,
            ),
        )

    def _add_runtime(self, runtime: list[_Event], driver: list[_Event]) -> None:
        events = runtime + driver
        args = _args_of(events)
        driver_flags = np.zeros(len(events), dtype=bool)
        driver_flags[len(runtime) :] = True
        self.runtime.add(
            events,
            self.names,
            self.tids,
            correlation=_ids([a.correlation for a in args]),
            external_id=_external_ids(args),
            driver=driver_flags,
        )

    def _add_flows(self, flows: list[_Event]) -> None:
        # Flows are only read to fill in missing correlation ids, which a writer omits for
        # the whole trace or not at all: keep them (about a third of a GPU trace's events)
        # only once a GPU op or runtime call without one has been seen.
        if not self.need_flows:
            self.need_flows = bool(
                (self.gpu.rows and (self.gpu.parts["correlation"][-1] < 0).any())
                or (self.runtime.rows and (self.runtime.parts["correlation"][-1] < 0).any())
            )
            if not self.need_flows:
                return
        flows = [f for f in flows if f.cat in LAUNCH_FLOW_CATEGORIES]
        self.flows.add(
            flows,
            self.names,
            self.tids,
            flow_id=_ids([f.id for f in flows]),
            flow_start=np.fromiter((f.ph == "s" for f in flows), dtype=bool, count=len(flows)),
        )

    def finish(self, require_events: bool = True) -> TraceEvents:
        if require_events and self.events_seen == 0:
            raise CorruptArtifact(f"unusable trace {self.path}: it holds no events")
        gpu = self.gpu.table()
        gpu.extra["kind"] = gpu.extra["kind"].astype(np.int8)
        gpu.extra["bytes"] = gpu.extra["bytes"].astype(np.float64)
        runtime = self.runtime.table()
        runtime.extra["driver"] = runtime.extra["driver"].astype(bool)
        flows = self.flows.table()
        threads = tuple(self.tids.ordered())
        _link_by_flows(gpu, runtime, flows, threads)
        return TraceEvents(
            path=self.path,
            names=tuple(self.names.ordered()),
            cpu_ops=self.cpu.table(),
            annotations=self.annotations.table(),
            python=self.python.table(),
            gpu=gpu,
            runtime=runtime,
            shapes=self.shapes,
            concrete=self.concrete,
            device_properties=self.device_properties,
            distributed=self.distributed,
            gpu_annotations=self.gpu_annotations.table(),
            threads=threads,
            base_time_ns=self.base_time_ns,
            profiler_range_count=self.profiler_ranges,
            comm_cpu=self.comm_cpu,
            comm_gpu=self.comm_gpu,
            invalid_comm_args=self.invalid_comm,
            invalid_shapes=self.invalid_shapes,
        )


# The largest message a collective can carry, in elements: 2**40 (a TiB of bytes at one
# byte each, more than any GPU's memory). A bigger `In msg nelems` (10**30, 1e308) is no
# size; and 2**20 ranks in one group, more than any job has run.
MAX_MSG_NELEMS = 1 << 40
MAX_GROUP_SIZE = 1 << 20


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and np.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        # isdigit() alone is true for "²", which int() refuses.
        return int(value)
    return None


def _in_range(value: Any, low: int, high: int) -> int | None:
    """An integer field that only [low, high] can hold; anything else is no value."""
    found = _int_or_none(value)
    return found if found is not None and low <= found <= high else None


def _collect_comm(args: list[_Args], offset: int, out: dict[int, CommArgs]) -> int:
    """The rows (offset + index) whose args name a collective or its message size; returns
    how many recorded a size or group size that no collective can have (ignored)."""
    invalid = 0
    for i, a in enumerate(args):
        if a.collective_name is None and a.in_msg_nelems is None:
            continue
        name = a.collective_name
        found = CommArgs(
            collective=name if isinstance(name, str) else None,
            in_nelems=_in_range(a.in_msg_nelems, 0, MAX_MSG_NELEMS),
            out_nelems=_in_range(a.out_msg_nelems, 0, MAX_MSG_NELEMS),
            group_size=_in_range(a.group_size, 1, MAX_GROUP_SIZE),
            dtype=a.dtype if isinstance(a.dtype, str) else None,
        )
        recorded = (a.in_msg_nelems, a.out_msg_nelems, a.group_size)
        kept = (found.in_nelems, found.out_nelems, found.group_size)
        invalid += any(r is not None and k is None for r, k in zip(recorded, kept, strict=True))
        out[offset + i] = found
    return invalid


def _finite(value: Any) -> float:
    if isinstance(value, (int, float)):
        try:
            out = float(value)
        except OverflowError:
            return np.nan
        # math, not numpy: numpy's ufunc on one Python float costs ~1 us, per GPU row.
        return out if math.isfinite(out) else np.nan
    return np.nan


def _device_ids(args: list[_Args], events: list[_Event]) -> np.ndarray:
    """Each GPU-side event's device: args.device, else its row's pid (which is the device)."""
    return _ids(
        [a.device if type(a.device) is int else e.pid for a, e in zip(args, events, strict=True)]
    )


def _stream_ids(args: list[_Args], events: list[_Event]) -> np.ndarray:
    """Each GPU-side event's stream: args.stream, else its row's tid (which is the stream)."""
    return _ids(
        [a.stream if type(a.stream) is int else e.tid for a, e in zip(args, events, strict=True)]
    )


def _external_ids(args: list[_Args]) -> np.ndarray:
    return _ids([a.external_id if a.external_id is not None else a.external_id_2021 for a in args])


def _link_by_flows(gpu: Table, runtime: Table, flows: Table, threads: tuple[Any, ...]) -> None:
    """Fill missing correlation ids from the launch flows: a flow starts ('s') at the
    runtime call and ends ('f') at the GPU op, both at the event's own thread and time, and
    its id is the correlation id. Only rows without a correlation are touched."""
    gpu_corr, rt_corr = gpu.col("correlation"), runtime.col("correlation")
    need_gpu, need_rt = gpu_corr < 0, rt_corr < 0
    if len(flows) == 0 or not (need_gpu.any() or need_rt.any()):
        return
    # Threads as strings: 2021-era traces write tid "24572" on events, 24572 on flows.
    key_of = [(str(p), str(t)) for p, t in threads]
    fid, start = flows.col("flow_id"), flows.col("flow_start").astype(bool)
    by_place: dict[tuple[bool, tuple[str, str], float], int] = {}
    for code, ts, ident, is_start in zip(
        flows.tid.tolist(), flows.ts.tolist(), fid.tolist(), start.tolist(), strict=True
    ):
        if ident >= 0:
            by_place.setdefault((is_start, key_of[code], ts), ident)
    for table, need, corr, is_start in (
        (gpu, need_gpu, gpu_corr, False),
        (runtime, need_rt, rt_corr, True),
    ):
        for row in np.flatnonzero(need).tolist():
            found = by_place.get((is_start, key_of[int(table.tid[row])], float(table.ts[row])))
            if found is not None:
                corr[row] = found


def _decode_concrete(args: _Args) -> list[Any]:
    try:
        return _SHAPE_DECODER.decode(args.concrete) if len(args.concrete) else []
    except DECODE_ERRORS:
        return []


# The most elements one tensor can have: 2**40 (a TiB at one byte each), past any GPU's
# memory. `Input Dims` of 1e12 x 1e12 made 2.6e37 FLOPs and an MFU of 1.1e28 %.
MAX_TENSOR_ELEMENTS = 1 << 40


def plausible_dims(dims: list[Any]) -> bool:
    """Whether every tensor in an op's `Input Dims` (a list per input; a list of lists for a
    tensor list) has non-negative integer sizes and at most MAX_TENSOR_ELEMENTS elements."""
    stack: list[Any] = list(dims)
    while stack:
        item = stack.pop()
        if not isinstance(item, list) or not item:
            continue
        if all(isinstance(d, int) and not isinstance(d, bool) for d in item):
            numel = 1
            for d in item:
                if d < 0 or d > MAX_TENSOR_ELEMENTS:
                    return False
                numel *= d
            if numel > MAX_TENSOR_ELEMENTS:
                return False
        else:
            stack.extend(item)
    return True


def _decode_shapes(args: _Args) -> tuple[list[Any], list[Any]]:
    types: list[Any] = []
    dims: list[Any] = []
    try:
        if len(args.input_type):
            types = _SHAPE_DECODER.decode(args.input_type)
        if len(args.input_dims):
            dims = _SHAPE_DECODER.decode(args.input_dims)
    except DECODE_ERRORS:
        # A malformed shapes payload only costs the precision facts of this one op.
        log.debug("undecodable record_shapes payload")
    return types, dims
