"""The optimization catalog: complete entries, hooks, env merging, no torch import.

Which ids exist, and their kinds, is pinned by tests/unit/catalog_snapshot.json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from load_limits import scaled

from perfdoctor.model import Facts
from perfdoctor.optimize.catalog import (
    CATALOG,
    TOLERANCES,
    describe_optimizations,
    env_for,
    tolerance_for,
    unknown_ids,
)


@pytest.mark.parametrize("opt_id", sorted(CATALOG))
def test_every_entry_is_complete(opt_id):
    opt = CATALOG[opt_id]
    assert opt.id == opt_id
    assert opt.title and opt.risk and opt.code_change and opt.applies_when
    assert opt.device in ("any", "cuda", "cpu")
    assert opt.numerics_tolerance in TOLERANCES
    assert bool(opt.verify) == opt.auto_applicable  # every applier says how it proves itself
    assert all(other in CATALOG and opt_id in CATALOG[other].excludes for other in opt.excludes)


def test_env_optimizations_carry_their_environment():
    assert env_for(["expandable-segments"]) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"
    }
    assert env_for(["compile", "larger-batch"]) == {}


def test_env_merges_with_the_users_allocator_settings():
    merged = env_for(["expandable-segments"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    assert merged == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"}
    theirs = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    assert env_for(["expandable-segments"], theirs) == theirs  # their explicit key stands


def test_tolerance_of_a_stack_is_the_loosest():
    assert tolerance_for(["fused-optimizer"]) == TOLERANCES["exact"]
    assert tolerance_for(["fused-optimizer", "amp-bf16"]) == TOLERANCES["low-precision"]
    assert tolerance_for(["tf32", "dataloader-workers"]) == TOLERANCES["data-order"]
    assert tolerance_for([]) == TOLERANCES["exact"]


def test_unknown_ids_for_cli_validation():
    assert unknown_ids(["compile", "turbo", "amp-bf16", "x"]) == ["turbo", "x"]


def test_describe_rows_are_json_and_in_catalog_order():
    rows = describe_optimizations()
    assert [r["id"] for r in rows] == list(CATALOG)
    json.dumps(rows)
    assert {"id", "title", "kind", "risk", "code_change", "verify", "device"} <= set(rows[0])


def test_the_optimize_package_never_imports_torch():
    probe = (
        "import sys\n"
        "import perfdoctor.optimize.catalog, perfdoctor.optimize.recommend\n"
        "import perfdoctor.optimize.verdicts, perfdoctor.optimize.run_samples\n"
        "import perfdoctor.optimize.compare_runs, perfdoctor.optimize.regression_gate\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml'))\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=scaled(60))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("opt_id", sorted(CATALOG))
def test_hooks_answer_on_an_empty_run(opt_id):
    # A baseline that measured nothing must not break a hook: no notes, no skip, no sizing.
    opt, empty = CATALOG[opt_id], Facts({})
    if opt.conflicts is not None:
        assert all(isinstance(note, str) for note in opt.conflicts(empty, frozenset()))
    if opt.skip_auto is not None:
        assert opt.skip_auto(empty, False) is None
    if opt.stand_in is not None:
        assert opt.stand_in(empty) in (opt_id, *opt.excludes)
    if opt.tailor is not None:
        assert opt.tailor(empty, opt.code_change) == opt.code_change
    if opt.sizing is not None:
        assert opt.sizing(empty, 4) is None
    assert describe_optimizations()[list(CATALOG).index(opt_id)]["hooks"] == list(opt.hooks)


def test_only_runtime_entries_are_sized():
    # A sizing reaches the child through its applier: a manual entry has none to read it.
    assert all(o.kind == "runtime" for o in CATALOG.values() if o.sizing is not None)
