"""fixes.patch (optimize/fix_patch.py, source_edits.py): one small hand-written script per fix
kind; the patch applies with `patch -p1` and `git apply`, comes off with -R, and the patched
file is the change the fix names, and still Python."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perfdoctor.model import AppliedOptimization, Facts, SourceLocation, VariantResult
from perfdoctor.optimize.fix_patch import PATCH_NAME, build_fix_patch, patch_root, proven_fixes

needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="no patch(1)")


def variant(
    ids: tuple[str, ...],
    verdict: str = "accepted",
    speedup: float = 2.0,
    detail: str = "",
    peel_of: str | None = None,
    label: str | None = None,
) -> VariantResult:
    return VariantResult(
        label=label or "+".join(ids),
        optimizations=ids,
        step_ms_p50=1.0,
        step_ms_p90=None,
        speedup=speedup,
        speedup_noise=None,
        peak_memory_bytes=None,
        loss_delta=None,
        verdict=verdict,  # type: ignore[arg-type]
        reason="",
        applied=tuple(AppliedOptimization(i, True, True, detail) for i in ids),
        method="in-process",
        interval=(speedup * 0.9, speedup * 1.1),
        load="0.3 other busy cores",
        peel_of=peel_of,
    )


def facts(**settings: Any) -> Facts:
    locations = settings.pop("locations", {})
    values = settings.pop("values", {"cpu_cores_logical": 2})
    return Facts(values=values, locations=locations, settings=settings)


def roundtrip(tmp_path: Path, name: str, text: str) -> str:
    """Patch a copy with patch -p1, check --dry-run, -R and git apply; the patched text."""
    patch_file = tmp_path / PATCH_NAME
    assert patch_file.is_file()
    original = (tmp_path / name).read_text()
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "check": True}
    subprocess.run(["patch", "-p1", "--dry-run", "-i", str(patch_file)], **run)
    subprocess.run(["patch", "-p1", "-i", str(patch_file)], **run)
    patched = (tmp_path / name).read_text()
    ast.parse(patched)
    subprocess.run(["patch", "-p1", "-R", "-i", str(patch_file)], **run)
    assert (tmp_path / name).read_text() == original
    if shutil.which("git"):
        subprocess.run(["git", "apply", "--check", str(patch_file)], **run)
        subprocess.run(["git", "apply", str(patch_file)], **run)
        assert (tmp_path / name).read_text() == patched
        subprocess.run(["git", "apply", "-R", str(patch_file)], **run)
        assert (tmp_path / name).read_text() == original
    return patched


def make(
    tmp_path: Path, text: str, variants: list[VariantResult], f: Facts, name: str = "train.py"
):
    (tmp_path / name).write_text(text)
    patch = build_fix_patch(variants, f, name, tmp_path)
    (tmp_path / PATCH_NAME).write_text(patch.text())
    return patch


ANOMALY = """import torch
from torch import nn

torch.autograd.set_detect_anomaly(True)  # hunting a NaN
model = nn.Linear(4, 2)
with torch.autograd.detect_anomaly():
    model(torch.zeros(1, 4)).sum().backward()
"""


@needs_patch
def test_anomaly_off(tmp_path: Path) -> None:
    patch = make(tmp_path, ANOMALY, [variant(("anomaly-off",))], facts())
    patched = roundtrip(tmp_path, "train.py", ANOMALY)
    assert "torch.autograd.set_detect_anomaly(False)  # hunting a NaN" in patched
    assert "with torch.autograd.set_detect_anomaly(False):" in patched
    assert "True" not in patched
    assert [h.line for h in patch.hunks] == [4, 6]
    assert "2.00x [1.80, 2.20]" in patch.hunks[0].gain
    assert patch.text().startswith("# perfdoctor fixes.patch")


LOADER = """import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.zeros(8, 2))
loader = DataLoader(
    ds,
    batch_size=4,
    shuffle=True,
)
"""


@needs_patch
def test_dataloader_workers_from_the_variants_count(tmp_path: Path) -> None:
    f = facts(dataloader={"location": {"file": "train.py", "line": 5}})
    v = variant(("dataloader-workers",), detail="train.py:5: num_workers 0 -> 2, intra-op ...")
    make(tmp_path, LOADER, [v], f)
    patched = roundtrip(tmp_path, "train.py", LOADER)
    assert "    shuffle=True, num_workers=2,\n)\n" in patched  # the trailing comma kept


@needs_patch
def test_workers_measured_in_a_persistent_twin_are_patched_persistent(tmp_path: Path) -> None:
    """In one process the workers ran in a persistent twin loader: the patch is what was
    measured, so the workers outlive each epoch there too."""
    f = facts(dataloader={"location": {"file": "train.py", "line": 5}})
    detail = "train.py:5: num_workers 0 -> 2 in a persistent twin loader over the same dataset"
    make(tmp_path, LOADER, [variant(("dataloader-workers",), detail=detail)], f)
    patched = roundtrip(tmp_path, "train.py", LOADER)
    assert "    shuffle=True, num_workers=2, persistent_workers=True,\n)\n" in patched
    compile(patched, "train.py", "exec")


@needs_patch
def test_dataloader_workers_replace_the_scripts_count(tmp_path: Path) -> None:
    text = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "x = DataLoader([1, 2], num_workers=4)\n"
    )
    f = facts(dataloader={"location": {"file": "train.py", "line": 4}})
    v = variant(("dataloader-workers",), detail="num_workers 4 -> 0 (the script's, lowered)")
    make(tmp_path, text, [v], f)
    assert "DataLoader([1, 2], num_workers=0)" in roundtrip(tmp_path, "train.py", text)


OPTIM = """import torch
model = torch.nn.Linear(2, 2)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
other = torch.optim.RMSprop(model.parameters())
"""


@needs_patch
def test_fused_optimizer_and_foreach_only_class(tmp_path: Path) -> None:
    f = facts(
        optimizers=[
            {"class": "AdamW", "location": {"file": "train.py", "line": 3}},
            {"class": "RMSprop", "location": {"file": "train.py", "line": 4}},
        ]
    )
    make(tmp_path, OPTIM, [variant(("fused-optimizer",))], f)
    patched = roundtrip(tmp_path, "train.py", OPTIM)
    # fused and foreach both True raise: the script's foreach=True becomes None.
    assert "AdamW(model.parameters(), lr=1e-3, foreach=None, fused=True)" in patched
    assert "RMSprop(model.parameters(), foreach=True)" in patched


THREADS_NONE = """import os
import torch
from torch import nn

torch.manual_seed(0)
"""
THREADS_SET = """import torch
torch.set_num_threads(2)
"""


@needs_patch
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (THREADS_NONE, "import torch\nfrom torch import nn\ntorch.set_num_threads(1)\n"),
        (THREADS_SET, "torch.set_num_threads(1)\n"),
    ],
)
def test_cpu_threads_inserted_or_lowered(tmp_path: Path, text: str, expected: str) -> None:
    v = variant(("cpu-threads",), detail="intra-op threads held at 1 (2 usable cores minus ...)")
    make(tmp_path, text, [v], facts())
    patched = roundtrip(tmp_path, "train.py", text)
    assert expected in patched
    assert "set_num_threads(2)" not in patched


ZERO = """import torch
opt = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)
opt.zero_grad()
opt.zero_grad(set_to_none=False)
"""


@needs_patch
def test_zero_grad_set_to_none(tmp_path: Path) -> None:
    make(tmp_path, ZERO, [variant(("zero-grad-set-to-none",))], facts())
    patched = roundtrip(tmp_path, "train.py", ZERO)
    assert patched.count("zero_grad(set_to_none=True)") == 2


@needs_patch
def test_cudnn_benchmark_and_tf32_inserted_after_import(tmp_path: Path) -> None:
    text = "import torch as th\n\nx = th.zeros(1)\n"
    make(tmp_path, text, [variant(("cudnn-benchmark",)), variant(("tf32",), speedup=1.5)], facts())
    patched = roundtrip(tmp_path, "train.py", text)
    assert "th.backends.cudnn.benchmark = True\n" in patched
    assert "th.set_float32_matmul_precision('high')\n" in patched


@needs_patch
def test_cpu_autocast_disabled(tmp_path: Path) -> None:
    text = (
        "import torch\nwith torch.autocast(device_type='cpu', dtype=torch.bfloat16):\n"
        "    pass\nwith torch.autocast('cuda'):\n    pass\n"
    )
    make(tmp_path, text, [variant(("cpu-fp32",))], facts())
    patched = roundtrip(tmp_path, "train.py", text)
    assert "dtype=torch.bfloat16, enabled=False)" in patched
    assert "autocast('cuda'):" in patched


def test_env_fix_is_a_line_to_add(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    patch = build_fix_patch([variant(("expandable-segments",))], facts(), "train.py", tmp_path)
    assert patch.diff == ""
    assert [a.line for a in patch.lines_to_add] == [
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    ]
    assert "by hand (expandable-segments" in patch.text()


def test_no_source_line_lists_the_snippet(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\n")
    patch = build_fix_patch(
        [variant(("compile",))], facts(), "train.py", tmp_path, {"compile": "model.compile()"}
    )
    assert patch.diff == "" and patch.lines_to_add[0].line == "model.compile()"


def test_kwargs_refuse_and_fall_back_to_a_line(tmp_path: Path) -> None:
    text = "from torch.utils.data import DataLoader\nkw = {}\nx = DataLoader([1], **kw)\n"
    f = facts(dataloader={"location": {"file": "train.py", "line": 3}})
    v = variant(("dataloader-workers",), detail="num_workers 0 -> 2")
    patch = make(tmp_path, text, [v], f)
    assert patch.diff == ""
    assert "**kwargs" in patch.lines_to_add[0].where


def test_only_accepted_fixes_and_peels_drop(tmp_path: Path) -> None:
    variants = [
        variant(("anomaly-off",), speedup=2.0),
        variant(("zero-grad-set-to-none",), verdict="rejected", speedup=1.0),
        variant(("anomaly-off", "cpu-threads"), label="stacked", speedup=2.5),
        variant(("cpu-threads",), verdict="rejected", peel_of="cpu-threads", label="p"),
    ]
    ids = [f.optimization_id for f in proven_fixes(variants)]
    assert ids == ["anomaly-off"]  # cpu-threads: only in the stack, and its peel says drop
    stacked = proven_fixes(variants[:3])
    assert [(f.optimization_id, f.label) for f in stacked] == [
        ("anomaly-off", "anomaly-off"),
        ("cpu-threads", "stacked"),
    ]


def test_files_outside_the_root_are_not_patched(tmp_path: Path) -> None:
    inner = tmp_path / "proj"
    inner.mkdir()
    (tmp_path / "lib.py").write_text(ANOMALY)
    (inner / "train.py").write_text("import torch\n")
    loc = SourceLocation(file="../lib.py", line=4)
    f = facts(locations={"debug_mode": (loc,)})
    (inner / ".git").mkdir()
    patch = build_fix_patch([variant(("anomaly-off",))], f, "train.py", inner)
    assert patch.diff == "" and patch.lines_to_add
    assert patch_root(inner / "sub") == inner


@needs_patch
def test_git_root_prefix_and_no_final_newline(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    sub = tmp_path / "scripts"
    sub.mkdir()
    text = "import torch\ntorch.autograd.set_detect_anomaly(True)"  # no newline at the end
    (sub / "t.py").write_text(text)
    patch = build_fix_patch([variant(("anomaly-off",))], facts(), "t.py", sub)
    assert "--- a/scripts/t.py" in patch.diff
    (tmp_path / PATCH_NAME).write_text(patch.text())
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "check": True}
    subprocess.run(["patch", "-p1", "-i", PATCH_NAME], **run)
    assert (sub / "t.py").read_text() == "import torch\ntorch.autograd.set_detect_anomaly(False)"
    subprocess.run(["patch", "-p1", "-R", "-i", PATCH_NAME], **run)
    assert (sub / "t.py").read_text() == text


# What the appliers record: a run that applies the workers for good, and the README demo's
# in-process A/B, whose twin loader is switched against the script's own iterator.
_WORKER_DETAILS = [
    ("num_workers 0 -> 2, ...", 2, ""),
    (
        "num_workers 0 -> 1 in a persistent twin loader over the same dataset, switched in "
        "blocks against the script's own iterator (data 50 ms/batch vs 13 ms compute ...)",
        1,
        ", persistent_workers=True",  # as the twin measured it
    ),
]


@needs_patch
@pytest.mark.parametrize(("detail", "workers", "persistent"), _WORKER_DETAILS)
def test_recorded_run_locations_patch_the_sample_model(
    tmp_path: Path, detail: str, workers: int, persistent: str
) -> None:
    """The locations a real run recorded (the fixture run of cnn_slow_dataloader.py) lead
    the edits to the script's DataLoader call, and the patch applies to a copy of it."""
    from perfdoctor.diagnose import diagnose_session

    root = Path(__file__).resolve().parents[3]
    diagnosis = diagnose_session(root / "tests/fixtures/runs/cnn_slow_dataloader_cpu")
    name = "sample_models/cnn_slow_dataloader.py"
    (tmp_path / "sample_models").mkdir()
    shutil.copy(root / name, tmp_path / name)
    v = variant(("dataloader-workers",), detail=f"{name}:217: {detail}")
    patch = build_fix_patch([v], diagnosis.facts, name, tmp_path)
    change = f"num_workers={workers}{persistent}"
    assert [(h.file, h.change) for h in patch.hunks] == [(name, change)]
    (tmp_path / PATCH_NAME).write_text(patch.text())
    patched = roundtrip(tmp_path, name, "")
    assert f"        num_workers={workers}," in patched
    assert ("persistent_workers=True" in patched) == bool(persistent)


@needs_patch
def test_deterministic_and_sync_debug_settings_switched_off(tmp_path: Path) -> None:
    text = (
        "import torch\ntorch.backends.cudnn.deterministic = True\n"
        "torch.use_deterministic_algorithms(True)\ntorch.cuda.set_sync_debug_mode('warn')\n"
    )
    variants = [variant(("cudnn-nondeterministic",)), variant(("debug-modes-off",), speedup=1.1)]
    make(tmp_path, text, variants, facts())
    patched = roundtrip(tmp_path, "train.py", text)
    assert "torch.backends.cudnn.deterministic = False\n" in patched
    assert "torch.use_deterministic_algorithms(False)\n" in patched
    assert "torch.cuda.set_sync_debug_mode(0)\n" in patched


def test_the_report_holds_the_patch_for_a_script_and_a_module(tmp_path: Path) -> None:
    """diagnose._fix_patch, as analyze_session calls it: the run's working directory from
    its spec, a -m module resolved to its file there, a launcher command left alone."""
    from dataclasses import replace

    from perfdoctor import diagnose
    from perfdoctor.model import Target

    root = Path(__file__).resolve().parents[3]
    diagnosis = diagnose.diagnose_session(root / "tests/fixtures/runs/tabular_mlp_debug_cpu")
    record = diagnosis.record
    assert record.spec is not None
    record = replace(record, spec=replace(record.spec, cwd=str(tmp_path)))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(ANOMALY)
    accepted = [variant(("anomaly-off",))]
    for target in (Target("script", "pkg/train.py"), Target("module", "pkg.train")):
        made = diagnose._fix_patch(accepted, diagnosis, record, target, None, tmp_path / "s")
        assert made["hunks"][0]["file"] == "pkg/train.py"
        assert made["apply"] == f"cd {tmp_path} && git apply {tmp_path}/s/{PATCH_NAME}"
        assert made["text"].startswith("# perfdoctor fixes.patch")
    command = Target("command", "torchrun", ("pkg/train.py",))
    assert diagnose._fix_patch(accepted, diagnosis, record, command, None, tmp_path) == {}
    rejected = [variant(("anomaly-off",), verdict="rejected")]
    target = Target("script", "pkg/train.py")
    assert diagnose._fix_patch(rejected, diagnosis, record, target, None, tmp_path) == {}


def test_a_coupled_variant_patches_the_threads_it_ran_beside_the_workers() -> None:
    """One cpu-threads record of a run with a coupled arm holds both counts: alone (2, the
    usable cores) and beside the twin loader's workers (1). The patch takes the count of
    the variant that accepted the fix."""
    from perfdoctor.optimize.fix_patch import _threads
    from perfdoctor.optimize.sizing import COUPLED_DETAIL

    detail = "intra-op threads held at 2 (usable cores; 2 at startup); " + COUPLED_DETAIL.format(
        workers=2, threads=1
    )
    coupled = proven_fixes([variant(("dataloader-workers", "cpu-threads"), detail=detail)])
    by_id = {f.optimization_id: f for f in coupled}
    assert _threads(by_id["cpu-threads"], facts()) == 1
    alone = proven_fixes([variant(("cpu-threads",), detail=detail)])
    assert _threads(alone[0], facts()) == 2
