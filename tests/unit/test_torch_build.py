"""tools/torch_build.py: which torch builds tools/install.sh takes from the configured index,
and which it fetches from PyTorch's CPU index instead (issue 25 item 4)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "torch_build.py"
_spec = importlib.util.spec_from_file_location("torch_build", TOOL)
assert _spec and _spec.loader
torch_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(torch_build)

NVIDIA = ["nvidia-cuda-runtime-cu12==12.8.90; platform_system == 'Linux'", "filelock"]
# The Linux wheel's requirements as the public index served them for torch==2.13.0
# (`pip install --dry-run --report` against it, 2026-11-28; the CUDA ones only).
PUBLIC_2_13_LINUX = [
    "filelock",
    "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,"
    'nvtx]==13.0.3; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
]
CUDA_TOOLKIT_ONLY = ['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"']


def _report(version: str, requires: list[str] | None = None) -> dict[str, Any]:
    meta = {"name": "torch", "version": version, "requires_dist": requires or ["filelock"]}
    return {"version": "1", "install": [{"metadata": meta}]}


@pytest.mark.parametrize(
    ("version", "requires", "system", "cpu"),
    [
        ("2.13.0+cpu", None, "Linux", True),  # PyTorch's CPU index, or a mirror of it
        ("2.13.0", NVIDIA, "Linux", False),  # the public index on Linux: a CUDA build
        ("2.13.0", PUBLIC_2_13_LINUX, "Linux", False),
        ("2.13.0", PUBLIC_2_13_LINUX, "Windows", False),  # the same requirements: CUDA
        ("2.13.0", CUDA_TOOLKIT_ONLY, "Darwin", False),
        ("2.13.0", None, "Linux", False),  # no local version on Linux: not known to be CPU
        ("2.13.0+cu128", None, "Linux", False),
        ("2.13.0+rocm6.4", None, "Linux", False),
        ("2.13.0", None, "Darwin", True),  # the public macOS wheel is a CPU build
        ("2.13.0", None, "Windows", True),
        ("2.13.0+cu128", None, "Windows", False),
    ],
)
def test_which_torch_is_a_cpu_build(
    version: str, requires: list[str] | None, system: str, cpu: bool
) -> None:
    assert torch_build.is_cpu_build(_report(version, requires), system) is cpu


def test_no_torch_in_the_report_is_not_a_cpu_build() -> None:
    assert torch_build.is_cpu_build({"install": []}, "Linux") is False


def test_the_exit_code_is_what_install_sh_branches_on() -> None:
    def run(stdin: str) -> int:
        return subprocess.run(
            [sys.executable, str(TOOL)], input=stdin, text=True, check=False
        ).returncode

    assert run(json.dumps(_report("2.13.0+cpu"))) == 0
    assert run(json.dumps(_report("2.13.0+cu128"))) == 1
    assert run("") == 1  # pip failed (an old pip without --report, no such version): CPU index


def test_install_sh_falls_back_to_the_pytorch_cpu_index() -> None:
    script = (TOOL.parent / "install.sh").read_text()
    assert "tools/torch_build.py" in script
    assert "https://download.pytorch.org/whl/cpu" in script
    assert '--index-url "$TORCH_CPU_INDEX"' in script
