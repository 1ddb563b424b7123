"""In-process harness for applier tests: a real Runtime driven the way the probes drive it.

`Harness.train()` runs a tiny training loop and publishes what the probes would: the start of
each step, the roots at the first optimizer step, and the end of the run. Every patch the
appliers made is undone by `close()` (the fixture calls it), so tests stay independent.
With `positions`, the appliers are switched on or off before each step, as the in-process
A/B controller does at step boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from perfdoctor.collect import appliers
from perfdoctor.collect.appliers.base import Applier
from perfdoctor.collect.runtime import Runtime
from perfdoctor.model import RunSpec, Target


def make_runtime() -> Runtime:
    spec = RunSpec(
        label="test", target=Target(kind="script", name="train.py"), cwd=".", run_dir="."
    )
    return Runtime(spec)


@dataclass
class Harness:
    ids: Sequence[str]
    runtime: Runtime = field(default_factory=make_runtime)
    applied: appliers.AppliedSet | None = None
    losses: list[float] = field(default_factory=list)

    def install(self) -> Harness:
        self.applied = appliers.install(self.ids, self.runtime)
        return self

    def train(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
        *,
        steps: int,
        loss_fn: Callable[[Any, torch.Tensor], torch.Tensor] | None = None,
        before_step: Callable[[torch.nn.Module], None] | None = None,
        zero_grad: Callable[[], None] | None = None,
        positions: Sequence[bool] | None = None,
    ) -> list[float]:
        loss_fn = loss_fn or (lambda out, y: torch.nn.functional.mse_loss(out, y))
        iterator = iter(batches)
        for index in range(steps):
            if positions is not None:
                self.switch(positions[index])
            self.runtime.publish_step_start(index, "warmup" if index < 1 else "timed")
            x, y = next(iterator)
            (zero_grad or optimizer.zero_grad)()
            loss = loss_fn(model(x), y)
            loss.backward()
            if before_step is not None:
                before_step(model)
            optimizer.step()
            self.losses.append(float(loss.detach()))
            if index == 0:
                self.runtime.publish_roots([model], [optimizer])
        return self.losses

    def applier(self, opt_id: str) -> Applier:
        assert self.applied is not None
        return next(a for a in self.applied.appliers if a.id == opt_id)

    def switch(self, on: bool) -> None:
        """Every installed applier on or off (between steps only)."""
        assert self.applied is not None
        for applier in self.applied.appliers:
            applier.switch(on)

    def results(self) -> dict[str, dict[str, Any]]:
        assert self.applied is not None
        self.runtime.publish_finalize()
        return {row["id"]: row for row in self.applied.results()}

    def close(self) -> None:
        if self.applied is not None:
            self.applied.uninstall()


def batches(
    shape: tuple[int, ...], out_features: int = 1, *, seed: int = 0, count: int = 1000
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(*shape, generator=generator),
            torch.randn(shape[0], out_features, generator=generator),
        )
        for _ in range(count)
    ]


class Mlp(torch.nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, width)
        self.fc2 = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)))


class Block(torch.nn.Module):
    def __init__(self, width: int, norm: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, width)
        self.norm = torch.nn.BatchNorm1d(width) if norm else torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.norm(self.fc(x)))


class Tower(torch.nn.Module):
    def __init__(self, depth: int = 3, width: int = 8, norm: bool = False) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width, norm) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def seeded(factory: Callable[[], torch.nn.Module], seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return factory()
