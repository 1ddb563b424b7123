"""NVTX ranges per step and per phase (--nvtx), so `nsys` shows perfdoctor's steps.

Start/end ranges (not push/pop) because a step and its phases do not nest strictly: the
step boundary falls at the next iteration's first event. A no-op without CUDA.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class Nvtx:
    def __init__(self, nvtx_module: Any) -> None:
        self._nvtx = nvtx_module
        self._start = getattr(nvtx_module, "range_start", None)
        self._end = getattr(nvtx_module, "range_end", None)

    @classmethod
    def create(cls, requested: bool) -> tuple[Nvtx | None, dict[str, Any]]:
        """The emitter (None when off or unavailable) and what to record in observations."""
        info: dict[str, Any] = {"requested": bool(requested), "available": False}
        if not requested:
            return None, info
        try:
            import torch

            if not torch.cuda.is_available():
                info["reason"] = "CUDA is not available"
                return None, info
            import torch.cuda.nvtx as nvtx_module
        except Exception as exc:  # a CPU-only build without the NVTX bindings
            info["reason"] = f"{type(exc).__name__}: {exc}"
            return None, info
        emitter = cls(nvtx_module)
        if emitter._start is None or emitter._end is None:
            info["reason"] = "torch.cuda.nvtx has no range_start/range_end"
            return None, info
        info["available"] = True
        return emitter, info

    def start(self, name: str) -> Any:
        try:
            return self._start(name)  # type: ignore[misc]
        except Exception:
            log.debug("nvtx range_start failed", exc_info=True)
            return None

    def end(self, handle: Any) -> None:
        if handle is None:
            return
        try:
            self._end(handle)  # type: ignore[misc]
        except Exception:
            log.debug("nvtx range_end failed", exc_info=True)
