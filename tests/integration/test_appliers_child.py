"""Appliers in real child runs (bootstrap + probes + appliers), kept tiny: ~3-5 s per run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perfdoctor.collect.launcher import launch
from perfdoctor.model import RunSpec, StepPlan, Target
from perfdoctor.optimize.run_samples import load_run_samples
from perfdoctor.optimize.sizing import WorkerSizing, sizing_env
from perfdoctor.optimize.verdicts import compare_variant

pytestmark = pytest.mark.integration

PLAN = StepPlan(warmup_steps=2, timed_steps=4, profiled_steps=0)

# Left over from debugging (anomaly mode, a loader in the main process) and a planted fp16
# overflow: one script serves both children below, the baseline and the variant.
SCRIPT = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.autograd.set_detect_anomaly(True)  # left over from debugging
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 1)

        def forward(self, x):
            return self.fc(x * 1e5)  # activations far beyond fp16's range

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-12)
    if __name__ == "__main__":
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    """
)


def run(
    tmp_path: Path,
    source: str,
    label: str,
    optimizations: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Path:
    script = tmp_path / "train.py"
    script.write_text(source)
    run_dir = tmp_path / label
    spec = RunSpec(
        label=label,
        target=Target(kind="script", name="train.py"),
        cwd=str(tmp_path),
        run_dir=str(run_dir),
        plan=PLAN,
        optimizations=optimizations,
        profile=False,
        record_memory_history=False,
        env=env or {},
    )
    manifest = launch(spec, timeout_s=120, echo_output=False)
    assert manifest.status == "completed", (manifest.status, manifest.error)
    return run_dir


# What pipeline._Runner passes for a dataloader-workers run (optimize/sizing.py).
SIZING_REASON = "data 51 ms/batch vs 4.1 ms compute; 3 workers on 4 cores"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two children for the tests below: the baseline, and a variant with four appliers at
    once and the worker count that pipeline._Runner passes for a dataloader-workers run
    (optimize/sizing.py). (The default count without the parent's sizing:
    test_appliers_data.py, in-process.)"""
    tmp = tmp_path_factory.mktemp("child")
    sizing = WorkerSizing(3, SIZING_REASON)
    env = dict(sizing_env(("dataloader-workers",), {"dataloader-workers": sizing}))
    optimizations = ("anomaly-off", "dataloader-workers", "tf32", "amp-fp16")
    baseline = run(tmp, SCRIPT, "baseline")
    return baseline, run(tmp, SCRIPT, "variant", optimizations, env=env)


@pytest.fixture(scope="module")
def debug_run(runs: tuple[Path, Path]) -> Path:
    return runs[1]


def test_workers_and_anomaly_off_applied_and_verified_in_a_child(debug_run: Path) -> None:
    (sample,) = load_run_samples([debug_run])
    rows = {a.id: a for a in sample.applied}
    assert rows["anomaly-off"].applied and rows["anomaly-off"].verified, rows
    assert "1 enable call(s)" in rows["anomaly-off"].detail
    workers = rows["dataloader-workers"]
    assert workers.applied and workers.verified, workers
    assert "train.py:7: num_workers 0 ->" in workers.detail
    assert rows["tf32"].applied is False and "CUDA" in rows["tf32"].detail
    assert len(sample.step_ms) == PLAN.timed_steps


def test_child_uses_the_worker_count_sized_by_the_parent(debug_run: Path) -> None:
    (sample,) = load_run_samples([debug_run])
    workers = {a.id: a for a in sample.applied}["dataloader-workers"]
    assert workers.applied and workers.verified, workers
    assert "train.py:7: num_workers 0 -> 3, intra-op threads left at " in workers.detail
    assert f"({SIZING_REASON})" in workers.detail
    assert "(3 workers); torch.get_num_threads() reads " in workers.detail


# The script sets its own intra-op threads (3: more than this machine may have, so that no
# budget of the cores would keep them) and writes what each training step runs with.
THREADS_SCRIPT = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(3)
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=16)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if __name__ == "__main__":
        with open("threads.txt", "w") as seen:
            for x, y in loader:
                seen.write(f"{torch.get_num_threads()}\\n")
                seen.flush()
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    """
)


def test_workers_variant_leaves_the_scripts_threads(tmp_path: Path) -> None:
    # One variant, one change: 2 workers from the parent's sizing, and the 3 intra-op threads
    # the script chose are what its steps run with (the coupled sizing before lowered them
    # to the cores the workers left).
    sizing = WorkerSizing(2, "data 43 ms/batch vs 6.0 ms compute on 3 threads; 2 workers")
    env = sizing_env(("dataloader-workers",), {"dataloader-workers": sizing})
    variant = run(tmp_path, THREADS_SCRIPT, "workers", ("dataloader-workers",), env=env)
    seen = (tmp_path / "threads.txt").read_text().split()
    assert len(seen) >= PLAN.warmup_steps + PLAN.timed_steps
    assert set(seen) == {"3"}
    (sample,) = load_run_samples([variant])
    workers = {a.id: a for a in sample.applied}["dataloader-workers"]
    assert workers.applied and workers.verified, workers
    assert "num_workers 0 -> 2, intra-op threads left at 3 (" in workers.detail
    assert "(2 workers); torch.get_num_threads() reads 3" in workers.detail


def test_planted_fp16_overflow_is_rejected_by_the_numerics_guard(
    runs: tuple[Path, Path],
) -> None:
    baseline, variant = load_run_samples(list(runs))
    rows = {a.id: a for a in variant.applied}
    assert rows["amp-fp16"].applied and rows["amp-fp16"].verified, rows
    result = compare_variant([baseline], [variant], ["amp-fp16"])
    assert result.verdict == "rejected"
    assert result.reason.startswith("loss is ")
    assert "at step 1 (baseline finite)" in result.reason  # iteration 1 ran in fp32
