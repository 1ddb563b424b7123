"""cpu-fp32 in-process: the script's own CPU bf16 autocast runs in fp32 while the fix is on,
and as the script wrote it while off (the in-process A/B switches it between steps)."""

from __future__ import annotations

import math

import torch
from appliers_support import batches, seeded

ON, OFF = True, False
PLAN = [ON, ON, ON, OFF, ON, OFF, OFF, ON]


class ScriptAutocastMlp(torch.nn.Module):
    """A model whose forward autocasts to bf16 on the CPU itself, as a script's would."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.dtypes: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.net(x)
        self.dtypes.append(out.dtype)
        return out.float()


def test_cpu_fp32_switches_the_scripts_autocast_between_steps(harness_factory) -> None:
    harness = harness_factory("cpu-fp32")
    model = seeded(ScriptAutocastMlp)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = harness.train(
        model, opt, batches((16, 8), count=len(PLAN)), steps=len(PLAN), positions=PLAN
    )
    assert model.dtypes == [torch.float32 if on else torch.bfloat16 for on in PLAN]
    assert all(math.isfinite(v) for v in losses)
    row = harness.results()["cpu-fp32"]
    assert row["applied"] and row["verified"], row
