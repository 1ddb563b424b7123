"""Where the shared GPU corpus lives: $PERFDOCTOR_GPU_CORPUS, or ../shared/gpu-corpus beside
the checkout. Tests that read it skip when it is absent (it is never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def corpus_dir() -> Path | None:
    env = os.environ.get("PERFDOCTOR_GPU_CORPUS")
    for candidate in (Path(env) if env else None, REPO.parent / "shared" / "gpu-corpus"):
        if candidate is not None and (candidate / "traces").is_dir():
            return candidate
    return None


def corpus_traces() -> list[Path]:
    root = corpus_dir()
    if root is None:
        return []
    return sorted(p for p in (root / "traces").iterdir() if p.name.endswith((".json", ".gz")))
