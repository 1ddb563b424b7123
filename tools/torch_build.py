"""Is the torch that pip would install a CPU build? Read from `pip install --dry-run --report`
on stdin; exit 0 for a CPU build, 1 otherwise (tools/install.sh, issue 25 item 4).

On Linux the public package index's torch wheel is a CUDA build of several GB (it pulls the
nvidia-* runtime wheels); PyTorch's own CPU index serves the CPU build, versioned `+cpu`. An
index that already serves a `+cpu` build (a mirror of PyTorch's CPU index, as on the machines
this was developed on) is used as it is. On macOS and Windows the public wheels are CPU
builds (CUDA on Windows comes from PyTorch's index only).
"""

from __future__ import annotations

import json
import platform
import sys
from typing import Any

# What a CUDA build of torch pulls in: the nvidia-* runtime wheels, and since torch 2.13 on
# the public index also NVIDIA's `cuda-toolkit` and `cuda-bindings` meta-packages.
CUDA_RUNTIME_WHEELS = ("nvidia-", "cuda-toolkit", "cuda-bindings")


def is_cpu_build(report: dict[str, Any], system: str) -> bool:
    """Whether the single torch of a pip installation report is a CPU build on `system`
    (platform.system()'s name)."""
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() != "torch":
            continue
        version = str(meta.get("version", ""))
        if "+cpu" in version:
            return True
        if "+" in version:  # +cu121, +rocm6.2, ...
            return False
        requires = " ".join(meta.get("requires_dist") or [])
        return system != "Linux" and not any(mark in requires for mark in CUDA_RUNTIME_WHEELS)
    return False  # pip chose nothing (no such version there): not known to be CPU


def main() -> int:
    try:
        report = json.load(sys.stdin)
    except ValueError:
        return 1
    return 0 if is_cpu_build(report, platform.system()) else 1


if __name__ == "__main__":
    sys.exit(main())
