"""The CPU's native bf16/fp16 flags, the facts made of them, and the cpu-fp32 applier that
measures fp32 on a CPU that emulates low-precision autocast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfdoctor.analyze.cpu_precision import cpu_precision_facts
from perfdoctor.collect.cpu_features import native_low_precision_flags

from .fake_runtime import FakeRuntime

torch = pytest.importorskip("torch")

FLAGS = "flags\t\t: fpu vme sse sse2 avx2 avx512f {extra}\n"


def _cpuinfo(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Some CPU\n" + FLAGS.format(extra=extra))
    return path


def test_flags_of_a_cpu_without_native_bf16(tmp_path: Path) -> None:
    flags = native_low_precision_flags(_cpuinfo(tmp_path, "avx512vl"))
    assert flags == []
    assert cpu_precision_facts(flags) == {"cpu_native_bf16": False, "cpu_native_fp16": False}


def test_flags_of_a_cpu_with_amx(tmp_path: Path) -> None:
    flags = native_low_precision_flags(_cpuinfo(tmp_path, "avx512_bf16 amx_bf16 amx_tile"))
    assert flags == ["avx512_bf16", "amx_bf16"]
    assert cpu_precision_facts(flags) == {"cpu_native_bf16": True, "cpu_native_fp16": False}


def test_unreadable_flags_are_unknown_not_absent(tmp_path: Path) -> None:
    assert native_low_precision_flags(tmp_path / "missing") is None
    assert cpu_precision_facts(None) == {"cpu_native_bf16": None, "cpu_native_fp16": None}


def test_cpu_fp32_applier_runs_cpu_autocast_regions_in_fp32_and_switches_back() -> None:
    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu_precision import CpuFp32

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    region = torch.autocast("cpu", dtype=torch.bfloat16)  # built once, as nanoGPT's ctx

    def forward_dtype() -> Any:
        with region:
            return model(x).dtype

    assert forward_dtype() == torch.bfloat16
    patcher = Patcher()
    applier = CpuFp32()
    try:
        applier.install(ApplyContext(FakeRuntime(), patcher))
        assert forward_dtype() == torch.float32
        applier.switch(False)
        assert forward_dtype() == torch.bfloat16
        applier.switch(True)
        assert forward_dtype() == torch.float32
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            assert model(x).dtype == torch.float32  # a disabled region stays disabled
        applier.run_verify(final=True)
        assert applier.result()["verified"] is True
    finally:
        patcher.restore()
    assert forward_dtype() == torch.bfloat16


def test_cpu_fp32_applier_refuses_a_script_without_cpu_autocast() -> None:
    from perfdoctor.collect.appliers.base import ApplyContext, Patcher
    from perfdoctor.collect.appliers.cpu_precision import CpuFp32

    patcher = Patcher()
    applier = CpuFp32()
    try:
        applier.install(ApplyContext(FakeRuntime(), patcher))
        torch.nn.Linear(2, 2)(torch.randn(1, 2))
        applier.run_verify(final=True)
        result = applier.result()
        assert result["applied"] is False and "never entered" in result["detail"]
    finally:
        patcher.restore()
