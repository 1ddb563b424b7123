"""tools/make_big_trace.py repeats the steps of a trace; the result parses, with every step
renumbered and the Python tree intact (no torch needed when a base trace is given)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from perfdoctor.analyze.trace import load_trace

TOOL = Path(__file__).parents[3] / "tools" / "make_big_trace.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("make_big_trace", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_repeated_steps_parse_with_the_same_per_step_facts(
    tool, fixtures: Path, tmp_path: Path, suffix: str
) -> None:
    out = tmp_path / f"big.pt.trace{suffix}"
    info = tool.make_big_trace(fixtures / "cuda_two_steps.json", out, size_mb=0.05)
    assert info["repeats"] > 3
    base = load_trace(fixtures / "cuda_two_steps.json")
    big = load_trace(out)
    assert big.steps == base.steps * info["repeats"]
    assert len(set(big.step_numbers)) == big.steps
    assert big.host_syncs_per_step == pytest.approx(base.host_syncs_per_step)
    assert big.gpu is not None and base.gpu is not None
    assert big.gpu.kernels_per_step == pytest.approx(base.gpu.kernels_per_step)
    assert big.locations["data_loading"][0].function == "__getitem__"
    assert big.locations["host_sync"][0].function == "train_step"
