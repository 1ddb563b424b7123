"""mode="reduce-overhead" on a live CUDA GPU: a planted input mutation makes inductor skip
CUDA graphs; the child records the skip with its reason (collect/compile_watch.py), the
`cudagraph-skips` rule fires and the compile section lists the reason and its fix.

Unverified where it was written (no CUDA there): the parsing is unit-tested on CPU
(tests/unit/collect/test_compile_watch.py drives inductor's own skip logger)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from perfdoctor import rundir

MUTATES_INPUT = """\
import torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(512, 512)

    def forward(self, x):
        x.mul_(1.0)  # mutates the graph's input: CUDA graphs are skipped for this graph
        return self.fc(x)


model = Net().cuda()
model.compile(mode="reduce-overhead")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(200):
    x = torch.randn(64, 512, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""


def test_a_cudagraph_skip_is_recorded_with_its_reason_and_reported(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(MUTATES_INPUT)
    proc = subprocess.run(
        [sys.executable, "-m", "perfdoctor", "profile", "--no-apply", "--quiet", "--warmup",
         "3", "--steps", "10", "--profile-steps", "2", "-o", "runs", "train.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=500, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    session = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    log = json.loads((session / rundir.BASELINE_LABEL / rundir.COMPILE_FILE).read_text())
    skips = [ln for ln in log["log_lines"] if ln["kind"] == "cudagraph_skip"]
    assert skips and "mutated inputs" in skips[0]["message"], log["log_lines"]
    assert log["counters"]["inductor"]["cudagraph_skips"] >= 1
    report = json.loads((session / rundir.REPORT_JSON).read_text())
    assert "cudagraph-skips" in {f["rule_id"] for f in report["findings"]}
    issues = report["series"]["compile"]["baseline"]["issues"]
    listed = [i for i in issues if i["kind"] == "cudagraph_skip"]
    assert listed and listed[0]["cause"] == "input mutation"
