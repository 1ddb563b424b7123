"""A `compile` variant measured in the in-process A/B and not re-run on its own: its
compile.json lies in the A/B run (ab/), and the report still gets its compile diagnosis,
over its own arm's steps (diagnose._ab_compile_series, compile_facts.compile_diagnosis)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from perfdoctor import diagnose, rundir
from perfdoctor.analyze.compile_facts import compile_diagnosis
from perfdoctor.model import StepRecord
from perfdoctor.session import VariantPlan
from tests.unit.analyze.test_compile_diag import DISABLE


def _ab_run(tmp_path: Path) -> SimpleNamespace:
    ab = tmp_path / "ab"
    ab.mkdir()
    rundir.write_json(
        ab / rundir.COMPILE_FILE,
        {
            "frames": [
                {"compile_id": "0/0", "step": 5, "compile_s": 4.0},
                {"compile_id": "0/1", "step": 7, "compile_s": 1.0},
            ],
            "graph_breaks": [{"compile_id": "0/0", "step": 5, "text": DISABLE}],
            "recompiles": [
                {"compile_id": "0/1", "step": 7, "text": "0/0: L['self'].n == 3   # h * self.n"}
            ],
        },
    )
    arms = ["baseline", "compile"] * 4  # blocks of 2 steps: 5,6 baseline; 7,8 compile; ...
    steps = tuple(
        StepRecord(index=5 + k, phase="timed", wall_ms=10.0, arm=arms[k // 2]) for k in range(16)
    )
    return SimpleNamespace(dir=ab, timed_steps=steps, trace=None)


def test_an_arm_is_diagnosed_over_its_own_steps(tmp_path: Path) -> None:
    d = compile_diagnosis(_ab_run(tmp_path), arm="compile")  # type: ignore[arg-type]
    assert d is not None and d.measured_steps == 8
    assert d.graph_breaks == 1 and d.recompiles == 1
    recompile = next(i for i in d.issues if i.kind == "recompile")
    # step 7 is one of the compile arm's: 1 s of recompile over its 8 steps
    assert recompile.cost_ms_per_step == 125.0
    assert any("counted, not priced" in n for n in d.notes)


def test_the_compile_variant_of_the_ab_run_gets_its_compile_series(
    tmp_path: Path, monkeypatch
) -> None:
    record = _ab_run(tmp_path)
    monkeypatch.setattr(diagnose, "load_run", lambda path, with_trace=True: record)
    session = SimpleNamespace(
        variants=[
            VariantPlan("compile", ("compile",), method="in-process", ab_run="ab"),
            VariantPlan("tf32", ("tf32",), method="in-process", ab_run="ab"),
            VariantPlan("amp-bf16", ("compile",), runs=("amp-bf16",), ab_run="ab"),
        ]
    )
    series = diagnose._ab_compile_series(tmp_path, session, {"amp-bf16": record})  # type: ignore[arg-type]
    assert set(series) == {"compile"}  # not tf32 (no compile), not one with its own run
    assert series["compile"]["frames_compiled"] == 2
