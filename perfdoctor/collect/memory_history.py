"""CUDA allocator history: recorded around the profiled window, dumped as a snapshot pickle.

When it records (CUDA only, and only once the script itself has initialised CUDA, so a CPU
script on a GPU machine never gets a CUDA context from us):

* during the warm-up steps, because out-of-memory errors mostly happen in the first
  iterations and that is when a user needs the history;
* off during the timed steps (about 2 us per allocator event would distort them);
* on again, cleared, for the profiled steps; the snapshot is dumped at the end of the window.

On CUDA OOM the snapshot is dumped from the allocator's OOM observer (when torch has one)
and again from the bootstrap's except path. Calls use keyword arguments only, filtered
against what the installed torch accepts (mechanics §4).
"""

from __future__ import annotations

import inspect
import logging
import os
import pickle
from pathlib import Path
from typing import Any

from perfdoctor import rundir

log = logging.getLogger(__name__)


class MemoryHistory:
    def __init__(self, run_dir: Path, *, requested: bool, max_entries: int) -> None:
        self._path = run_dir / rundir.MEMORY_SNAPSHOT_FILE
        self._requested = requested
        self._max_entries = int(max_entries)
        self._torch: Any = None
        self._recording = False
        self._observer_attached = False
        self.info: dict[str, Any] = {
            "requested": bool(requested),
            "available": False,
            "recorded": False,
            "max_entries": self._max_entries,
        }

    def setup(self, torch_module: Any = None) -> None:
        """Feature-detect; never initialises CUDA. `torch_module` replaces `import torch`
        (tests drive the CUDA paths with a stand-in on machines without a GPU)."""
        if not self._requested:
            return
        try:
            torch = torch_module
            if torch is None:
                import torch
            if not torch.cuda.is_available():
                self.info["reason"] = "CUDA is not available"
                return
            if not hasattr(torch.cuda.memory, "_record_memory_history"):
                self.info["reason"] = "torch.cuda.memory._record_memory_history is missing"
                return
        except Exception as exc:
            self.info["reason"] = f"{type(exc).__name__}: {exc}"
            return
        self._torch = torch
        self.info["available"] = True

    @property
    def recording(self) -> bool:
        return self._recording

    # ------------------------------------------------------------------ plan events

    def start(self, *, clear: bool) -> None:
        torch = self._torch
        if torch is None or self._recording or not torch.cuda.is_initialized():
            return
        self._attach_oom_observer()
        kwargs = self._history_kwargs(clear=clear)
        try:
            torch.cuda.memory._record_memory_history(**kwargs)
        except Exception as exc:
            self.info["error"] = f"{type(exc).__name__}: {exc}"
            log.debug("memory history not started", exc_info=True)
            return
        self._recording = True
        self.info["recorded"] = True

    def stop(self) -> None:
        if not self._recording:
            return
        self._recording = False
        try:
            self._torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            log.debug("memory history not stopped", exc_info=True)

    def dump(self, reason: str) -> bool:
        """Write memory_snapshot.pickle (loadable by PyTorch's memory viewer)."""
        torch = self._torch
        if torch is None or not torch.cuda.is_initialized():
            return False
        try:
            snapshot = torch.cuda.memory._snapshot()
            tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}.tmp")
            with tmp.open("wb") as fh:
                pickle.dump(snapshot, fh)
            os.replace(tmp, self._path)
        except Exception as exc:
            self.info["error"] = f"snapshot failed ({reason}): {type(exc).__name__}: {exc}"
            log.debug("memory snapshot failed", exc_info=True)
            return False
        traces = snapshot.get("device_traces", []) if isinstance(snapshot, dict) else []
        lengths = [len(t) for t in traces]
        self.info["entries"] = sum(lengths)
        self.info["truncated"] = any(n >= self._max_entries for n in lengths)
        self.info["snapshot_reason"] = reason
        return True

    def dump_on_oom(self) -> None:
        """From the bootstrap's except path, unless the OOM observer already dumped."""
        if self.info.get("snapshot_reason") != "oom":
            self.dump("oom")
        self.stop()

    # ------------------------------------------------------------------ details

    def _history_kwargs(self, *, clear: bool) -> dict[str, Any]:
        memory = self._torch.cuda.memory
        target = getattr(memory, "_record_memory_history_impl", None)
        if target is None:  # before ~2.5 the public function took the keywords itself
            target = memory._record_memory_history
        wanted: dict[str, Any] = {
            "enabled": "all",
            "context": "all",
            "stacks": "python",
            "max_entries": self._max_entries,
        }
        if clear:
            wanted["clear_history"] = True
        try:
            params = inspect.signature(target).parameters
        except (TypeError, ValueError):
            return wanted
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return wanted
        return {k: v for k, v in wanted.items() if k in params}

    def _attach_oom_observer(self) -> None:
        if self._observer_attached:
            return
        attach = getattr(self._torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        try:
            attach(self._on_oom)
            self._observer_attached = True
        except Exception:
            log.debug("OOM observer not attached", exc_info=True)

    def _on_oom(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        self.info["oom_events"] = int(self.info.get("oom_events", 0)) + 1
        self.info["oom"] = {
            "device": device,
            "requested_bytes": alloc,
            "device_allocated_bytes": device_alloc,
            "device_free_bytes": device_free,
        }
        self.dump("oom")
