"""A real torch.profiler trace (torch installed here, CPU), so that the field names and
shapes the parser relies on are checked against what torch actually writes.

One child process records a tiny training loop whose Dataset does Python work, with a
single-tensor Adam and zero_grad(set_to_none=False): ~4 s, run once per module.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from load_limits import scaled

from perfdoctor.analyze.trace import TraceSummary, load_trace

# Only the child imports torch: importing it here would cost every collection 2 s.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed"
)

SCRIPT = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset


    class SlowDataset(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            total = 0
            for k in range(3000):
                total += k * i
            return torch.full((16,), float(total % 7)), torch.tensor(i % 2)


    def pad_collate(batch):
        xs = torch.stack([x for x, _ in batch])
        ys = torch.stack([y for _, y in batch])
        return xs, ys


    def main():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
        opt = torch.optim.Adam(model.parameters(), foreach=False)
        loader = DataLoader(SlowDataset(), batch_size=8, collate_fn=pad_collate)
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            record_shapes=True,
            with_stack=True,
            profile_memory=True,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler("traces", use_gzip=True),
        )
        prof.start()
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            loss.item()
            prof.step()
        prof.stop()


    if __name__ == "__main__":
        main()
    """
)


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("real")
    (work / "train_tiny.py").write_text(SCRIPT)
    subprocess.run(
        [sys.executable, "train_tiny.py"],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=scaled(120),
    )
    (trace,) = sorted((work / "traces").glob("*.pt.trace.json.gz"))
    return trace


@pytest.fixture(scope="module")
def summary(real_trace: Path) -> TraceSummary:
    return load_trace(real_trace, user_roots=[str(real_trace.parent.parent)])


def test_torch_writes_the_fields_the_parser_reads(real_trace: Path) -> None:
    data = json.loads(gzip.decompress(real_trace.read_bytes()))
    events = data["traceEvents"]
    python = [e for e in events if e.get("cat") == "python_function"]
    assert python and all({"Python id", "Python parent id"} <= set(e["args"]) for e in python)
    mm = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm"]
    assert mm and {"Input type", "Input Dims", "External id"} <= set(mm[0]["args"])
    assert isinstance(mm[0]["ts"], float)
    steps = [e for e in events if e.get("cat") == "user_annotation"]
    assert any(e["name"].startswith("ProfilerStep#") for e in steps)
    assert any(e["name"].startswith("enumerate(DataLoader)#") for e in steps)
    assert any(e["name"].startswith("Optimizer.zero_grad#") for e in steps)


def test_real_trace_steps_and_op_mix(summary: TraceSummary) -> None:
    assert summary.steps == 3
    assert list(summary.step_numbers) == list(
        range(summary.step_numbers[0], summary.step_numbers[0] + 3)
    )
    assert summary.has_stacks and summary.has_shapes
    assert summary.gpu is None and summary.host_syncs_per_step is None
    assert summary.aten_ops_per_step is not None and summary.aten_ops_per_step > 20
    assert summary.op_share_basis == "cpu_op_time"
    assert summary.matmul_frac is not None and 0 < summary.matmul_frac < 1
    assert summary.fp32_matmul_conv_frac is not None and summary.fp32_matmul_conv_frac > 0
    assert summary.misaligned_lowp_gemm_count == 0


def test_real_trace_optimizer_findings(summary: TraceSummary) -> None:
    assert summary.single_tensor_optimizer is True
    assert summary.zero_grad_zeroing is True
    assert summary.locations["zero_grad"][0].file == "train_tiny.py"


def test_real_trace_data_loading_goes_to_the_users_getitem(summary: TraceSummary) -> None:
    assert summary.dataloader_ms_per_step is not None and summary.dataloader_ms_per_step > 0
    # Behaviour, not timing: the user's __getitem__ gets a share of the data loading time.
    # (Which location ranks first depends on how the machine's load splits the time.)
    by_site = {(loc.file, loc.function): loc for loc in summary.locations["data_loading"]}
    getitem = by_site.get(("train_tiny.py", "__getitem__"))
    assert getitem is not None, sorted(by_site)
    assert getitem.share is not None and getitem.share > 0
    functions = {loc.function for loc in summary.locations["data_loading"]}
    assert "pad_collate" in functions
