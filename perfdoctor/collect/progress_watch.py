"""The child's live progress: progress.jsonl tailed while it runs, one Progress per step for
the display, and the clock both sides measure from."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfdoctor.model import RunSpec
from perfdoctor.rundir import PROCS_DIR, PROGRESS_FILE


@dataclass(frozen=True)
class Progress:
    """One step the child reported, for a live display."""

    label: str
    step: int
    phase: str
    planned_steps: int
    elapsed_s: float
    note: str | None = None  # in-process A/B: pairs so far and each interval


class ProgressWatch:
    """Start time of the child, and the progress.jsonl rows it wrote so far."""

    def __init__(
        self, spec: RunSpec, run_dir: Path, on_progress: Callable[[Progress], None] | None
    ) -> None:
        self._spec = spec
        self._path = run_dir / PROGRESS_FILE
        self._on_progress = on_progress
        self._offset = 0
        self.t0 = 0.0
        self.t0_unix = 0.0
        self.rows = 0

    def start_clock(self) -> None:
        """Both clocks read together, just before the spawn: `t` = 0 for parent and child."""
        self.t0_unix = time.time()
        self.t0 = time.monotonic()

    def poll(self) -> None:
        """Read complete new lines only: the child may be halfway through writing one."""
        if self._offset == 0 and not self._path.is_file():
            # Training in processes the child started: follow the first one that steps.
            found = sorted(self._path.parent.glob(f"{PROCS_DIR}/*/{PROGRESS_FILE}"))
            if found:
                self._path = found[0]
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            self.rows += 1
            step = row.get("step")
            if self._on_progress is not None:
                self._on_progress(
                    Progress(
                        label=self._spec.label,
                        step=step if isinstance(step, int) else self.rows,
                        phase=str(row.get("phase", "")),
                        planned_steps=self._spec.plan.total_steps,
                        elapsed_s=round(time.monotonic() - self.t0, 3),
                        note=row.get("note") if isinstance(row.get("note"), str) else None,
                    )
                )
