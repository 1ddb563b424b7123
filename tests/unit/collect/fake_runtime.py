"""A stand-in for the child's runtime (collect/runtime.py) in appliers' unit tests: the
collections an applier reads, and hook registrations that do nothing."""

from __future__ import annotations

from typing import Any


class FakeRuntime:
    def __init__(self) -> None:
        self.roots: list[Any] = []
        self.optimizers: list[Any] = []
        self.dataloaders: list[Any] = []

    def on_roots_known(self, fn: Any) -> None: ...
    def on_step_start(self, fn: Any) -> None: ...
    def on_finalize(self, fn: Any) -> None: ...
