"""Where snapshot memory was allocated: the user's file:line, and what the memory holds.

Frames. A snapshot recorded with C++ stacks (`_record_memory_history(stacks="all")`) lists
each allocation's frames innermost first, C++ and Python mixed, with the Python frames that
could not be placed among the C++ ones appended after `_start`. The site of an allocation is
its innermost Python frame in the user's code: with known user roots (a perfdoctor run), a
file under them; with none (a snapshot handed over alone), the innermost `.py` frame outside
torch, the Python standard library, site-packages and the other known libraries.

Category (heuristics, from the frames of each live block at the peak; a `category` field, as
torch's profiler-derived snapshots carry, wins when present):
  optimizer_state  a frame in torch/optim/ (Optimizer.step, _init_group, zero_grad, and the
                   wrapper around a custom optimizer's step): exp_avg, momentum buffers, and
                   the step's temporaries
  gradients        under backward: torch/autograd/ (run_backward), Tensor.backward, the C++
                   autograd engine (autograd::Engine, AccumulateGrad); or with no stack at all
                   in a history that records stacks (backward runs in the engine's device
                   threads, which have no Python stack); includes backward's temporaries
  autocast_copies  made by autocast's cast (C++ frame at::autocast::cached_cast), under a
                   forward or not: the low-precision copies of the weights, which autocast
                   caches until its region exits, and casts of activations kept for backward
                   (checkpointing does not free the former)
  activations      under a module's forward (torch/nn/modules/ forward, _call_impl)
  parameters       Module.__init__ / to / cuda / _apply, torch/nn/init.py, nn/parameter.py
  other            a stack that matches none of these (input batches, user tensors)
  unknown          allocated before the history began (no trace entry), or freed in it without
                   its allocation being recorded: usually the parameters, moved to the GPU
                   before recording started
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from perfdoctor.analyze.frames import KNOWN_LIBRARIES, UserCode
from perfdoctor.model import SourceLocation

CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "autocast_copies",
    "other",
    "unknown",
)

Frames = Sequence[Any]


@dataclass(frozen=True)
class AllocationSite:
    location: SourceLocation  # share = fraction of the total this ranking is about
    bytes: int
    blocks: int


def _is_library(filename: str) -> bool:
    """A frame of torch / stdlib / site-packages / a known framework, by its path alone (the
    snapshot comes from another machine: its install prefix is not ours)."""
    norm = filename.replace("\\", "/")
    if any(m in norm for m in ("site-packages/", "dist-packages/", "/lib/python3", "/lib64/")):
        return True
    parts = [p for p in norm.split("/") if p]
    return any(p in KNOWN_LIBRARIES for p in parts[:-1])


class SitePicker:
    """Picks the frame that names an allocation's site, and displays its file."""

    def __init__(self, user_roots: Sequence[Any] = ()) -> None:
        self.user = UserCode(user_roots)
        self.has_roots = bool(self.user.roots)
        self._cache: dict[str, bool] = {}

    def _candidate(self, filename: str) -> bool:
        hit = self._cache.get(filename)
        if hit is None:
            hit = filename.endswith(".py") and not filename.startswith("<")
            hit = hit and self.user.is_user_file(filename) and not _is_library(filename)
            self._cache[filename] = hit
        return hit

    def frame(self, frames: Frames) -> dict[str, Any] | None:
        """The innermost frame in the user's code (frames are innermost first)."""
        for f in frames:
            if isinstance(f, dict) and self._candidate(str(f.get("filename", ""))):
                return f
        return None


def rank_sites(
    blocks: Iterable[tuple[Frames, int]], total: int, picker: SitePicker, top: int
) -> tuple[AllocationSite, ...]:
    """Bytes and block counts per site, largest first; blocks with no user frame are left out
    (their share is what the sites do not add up to)."""
    by_site: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for frames, size in blocks:
        f = picker.frame(frames)
        if f is None:
            continue
        key = (str(f.get("filename", "")), plain_int(f.get("line")), str(f.get("name", "")))
        by_site[key].append(size)
    ranked = sorted(by_site.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:top]
    display = _displayer(picker, [file for (file, _, _), _ in ranked])
    return tuple(
        AllocationSite(
            SourceLocation(
                display(file),
                line,
                func,
                share=sum(sizes) / total if total else None,
                count=len(sizes),
            ),
            bytes=sum(sizes),
            blocks=len(sizes),
        )
        for (file, line, func), sizes in ranked
    )


def _displayer(picker: SitePicker, files: list[str]) -> Any:
    """Paths under the user's roots relative to them; other absolute paths (a snapshot from
    another machine) shown from the directory above the sites' common directory
    (`cs336_basics/model.py`)."""
    shown = {f: picker.user.display(f) if picker.has_roots else f for f in files}
    absolute = [f for f in shown.values() if f.startswith("/")]
    if not absolute:
        return shown.__getitem__
    base = os.path.dirname(os.path.commonpath([os.path.dirname(f) for f in absolute]))

    def display(file: str) -> str:
        path = shown[file]
        return os.path.relpath(path, base) if path.startswith("/") and base != "/" else path

    return display


_MAX_INT = 1 << 52  # 4 PiB: beyond any real size, and sums of them stay exact in int64


def plain_int(value: Any) -> int:
    """A size, address offset or line from untrusted data: 0 for anything but a finite
    number, clamped so that numpy's int64 sums cannot overflow."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(-_MAX_INT, min(int(value), _MAX_INT))


_PROFILER_CATEGORIES = {
    "parameter": "parameters",
    "gradient": "gradients",
    "optimizer_state": "optimizer_state",
    "activation": "activations",
}
_MODULE_SETUP = ("_apply", "to", "cuda", "convert", "__init__", "reset_parameters")


def category(frames: Frames, given: str | None = None) -> str:
    """What a block holds, from its allocation stack (heuristics in the module docstring)."""
    named = _PROFILER_CATEGORIES.get(given or "")
    if named:
        return named
    if not frames:
        return "gradients"
    files: list[str] = []
    names: list[str] = []
    for f in frames:
        if isinstance(f, dict):
            files.append(str(f.get("filename", "")).replace("\\", "/"))
            names.append(str(f.get("name", "")))
    pairs = list(zip(files, names, strict=True))
    if any("torch/optim/" in f for f in files):
        return "optimizer_state"
    if (
        any("torch/autograd/" in f for f in files)
        or any(f.endswith("torch/_tensor.py") and n == "backward" for f, n in pairs)
        or any("autograd::Engine" in n or "AccumulateGrad" in n for n in names)
    ):
        return "gradients"
    if any("autocast::cached_cast" in n for n in names):
        return "autocast_copies"
    if any(
        "torch/nn/modules/" in f and n in ("forward", "_call_impl", "_wrapped_call_impl")
        for f, n in pairs
    ):
        return "activations"
    if any(f.endswith(("torch/nn/parameter.py", "torch/nn/init.py")) for f in files) or any(
        "torch/nn/modules/" in f and n in _MODULE_SETUP for f, n in pairs
    ):
        return "parameters"
    return "other"


def categorize(blocks: Iterable[tuple[Frames, int, str | None]]) -> dict[str, int]:
    out = dict.fromkeys(CATEGORIES, 0)
    for frames, size, given in blocks:
        out[category(frames, given)] += size
    return out
