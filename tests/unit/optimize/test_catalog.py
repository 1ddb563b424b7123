"""The optimization catalog: exact ids, complete entries, env merging, no torch import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from perfdoctor.optimize.catalog import (
    CATALOG,
    TOLERANCES,
    describe_optimizations,
    env_for,
    tolerance_for,
    unknown_ids,
)

RUNTIME = {
    "amp-bf16", "amp-fp16", "tf32", "cudnn-benchmark", "cudnn-nondeterministic",
    "channels-last", "compile", "compile-cudagraphs", "dataloader-workers", "pin-memory",
    "non-blocking-copies", "fused-optimizer", "zero-grad-set-to-none", "anomaly-off",
    "debug-modes-off", "cpu-threads", "activation-checkpointing",
}  # fmt: skip
ENV = {"expandable-segments"}
MANUAL = {
    "larger-batch", "grad-accumulation", "ddp-over-dataparallel", "nccl-backend",
    "remove-host-syncs", "no-grad-eval", "conv-bias-off", "create-on-device", "pad-gemm-dims",
    "detach-logged-tensors", "static-shapes", "faster-data-pipeline", "balance-rank-work",
}  # fmt: skip


def test_catalog_holds_exactly_the_agreed_ids_by_kind():
    assert set(CATALOG) == RUNTIME | ENV | MANUAL
    assert {i for i, o in CATALOG.items() if o.kind == "runtime"} == RUNTIME
    assert {i for i, o in CATALOG.items() if o.kind == "env"} == ENV
    assert {i for i, o in CATALOG.items() if o.kind == "manual"} == MANUAL


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
        "import perfdoctor.optimize.compare, perfdoctor.optimize.numerics\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml'))\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
