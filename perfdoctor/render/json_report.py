"""report.json: the Report as plain JSON, and back.

The keys are the field names of `perfdoctor.model.Report` and the dataclasses it holds, so
the schema (docs/report-schema.md) and the model cannot drift apart. Reading is driven by
the model's type hints: a field added to the model is read back without touching this
module, unknown keys from a newer minor writer are ignored, and a missing required key is a
clear CorruptArtifact instead of a KeyError deep inside a renderer.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from perfdoctor import model
from perfdoctor.errors import CorruptArtifact
from perfdoctor.model import Report
from perfdoctor.rundir import SCHEMA_VERSION, to_jsonable


def report_to_dict(report: Report) -> dict[str, Any]:
    """Plain JSON values; `schema_version` is the first key. NaN and inf become null."""
    data = _plain(to_jsonable(report))
    data["schema_version"] = report.schema_version
    return data


def _plain(value: Any) -> Any:
    """Numpy scalars and arrays (which analysis code may leave in facts or series) become
    plain numbers and lists, and non-finite floats become null, so the file is strict JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):  # numpy scalar or array, without importing numpy
        return _plain(value.tolist())
    return value


def render_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def report_from_dict(data: Mapping[str, Any]) -> Report:
    """The exact inverse of `report_to_dict` (for finite numbers)."""
    if not isinstance(data, Mapping):
        raise CorruptArtifact("report.json does not hold a JSON object")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptArtifact("report.json has no integer schema_version")
    if version > SCHEMA_VERSION:
        raise CorruptArtifact(
            f"report.json has schema_version {version}; this perfdoctor reads up to "
            f"{SCHEMA_VERSION}",
            hint="upgrade perfdoctor, or re-render the report with `perfdoctor report RUN`",
        )
    return _read_dataclass(Report, data, "report")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # The model uses `from __future__ import annotations`: resolve its string annotations.
    return typing.get_type_hints(cls, vars(model))


def _read_dataclass(cls: Any, data: Any, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise CorruptArtifact(f"report.json: {where} should be an object")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _read(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CorruptArtifact(f"report.json: {where} has no {f.name!r}")
    return cls(**kwargs)


def _read(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _read_dataclass(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        # Plain-value unions (Scalar, `float | None`) pass through; a dataclass member of the
        # union (`DeviceInfo | None`) is read as that dataclass.
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg):
                return _read_dataclass(arg, value, where)
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise CorruptArtifact(f"report.json: {where} should be a list")
        args = typing.get_args(tp)
        item_type = args[0] if args else Any
        return tuple(_read(item_type, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict, typing.Mapping) or tp in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise CorruptArtifact(f"report.json: {where} should be an object")
        args = typing.get_args(tp)
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): _read(value_type, v, f"{where}.{k}") for k, v in value.items()}
    # Literal, Scalar members, Any, str, int, float, bool: JSON already holds the value.
    return value
