"""tools/record_fixture.py: trimming a real run directory keeps what the analysis reads.

One child process runs a tiny training script under torch.profiler (with stacks, shapes and
memory, as perfdoctor's profiler window does) into a run-directory layout; the tests trim it
and check that the trimmed fixture is small and that the offline trace analysis still finds
the same steps, ops, syncs and source lines. Hand-written events cover the GPU parts.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from perfdoctor.analyze.memory import load_snapshot
from perfdoctor.analyze.trace import load_trace
from perfdoctor.rundir import find_traces

pytestmark = pytest.mark.integration

TOOL = Path(__file__).resolve().parents[2] / "tools" / "record_fixture.py"

TRAIN = """
import sys
import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


class Noisy(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        image = np.pad(rng.normal(size=(8, 8)), 2, mode="reflect").astype(np.float32)
        return torch.from_numpy(image.ravel()), index % 2


def main(run_dir):
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Noisy(), batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(144, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
        on_trace_ready=tensorboard_trace_handler(run_dir, use_gzip=True),
        record_shapes=True, with_stack=True, profile_memory=True, with_modules=True,
    ) as prof:
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            print("loss", loss.item())  # a host sync per step, attributed to this line
            prof.step()
            if step == 6:
                break


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_fixture", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["record_fixture"] = module
    spec.loader.exec_module(module)
    return module


rf = _load_tool()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as the launcher leaves it: spec, manifest, steps, samples, logs, trace."""
    root = tmp_path_factory.mktemp("project")
    (root / "train.py").write_text(textwrap.dedent(TRAIN))
    run_dir = root / "runs" / "baseline"
    run_dir.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "train.py", str(run_dir)], cwd=root, check=True, capture_output=True
    )
    (trace,) = find_traces(run_dir)
    spec = {
        "label": "baseline",
        "target": {"kind": "script", "name": str(root / "train.py"), "argv": []},
        "cwd": str(root),
        "run_dir": str(run_dir),
        "plan": {"warmup_steps": 2, "timed_steps": 5, "profiled_steps": 4},
    }
    manifest = {
        "label": "baseline",
        "status": "completed",
        "exit_code": 0,
        "wall_s": 1.0,
        "steps_seen": 11,
        "step_detection": "optimizer",
        "plan_complete": True,
        "versions": {"torch": "test"},
        "artifacts": {"spec": "spec.json", "progress": "progress.jsonl", "trace": trace.name},
    }
    (run_dir / "spec.json").write_text(json.dumps(spec))
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "steps.jsonl").write_text(
        "".join(json.dumps({"index": i, "phase": "timed", "wall_ms": 1.0}) + "\n" for i in range(5))
    )
    (run_dir / "progress.jsonl").write_text('{"step": 1}\n')
    (run_dir / "stdout.log").write_text("".join(f"line {i}\n" for i in range(500)))
    samples = [{"kind": "note", "t": 0.0, "message": "NVML unavailable"}]
    samples += [{"kind": "cpu", "t": i / 10, "cpu_percent": [50.0, 60.0]} for i in range(1000)]
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return run_dir


def _trace_data(run_dir: Path) -> dict[str, Any]:
    (trace,) = find_traces(run_dir)
    return json.loads(gzip.decompress(trace.read_bytes()))


def _step_names(data: dict[str, Any]) -> list[str]:
    return sorted(
        e["name"]
        for e in data["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )


def test_trim_keeps_the_first_two_profiled_steps_and_their_analysis(
    recorded: Path, tmp_path: Path
) -> None:
    original = _trace_data(recorded)
    assert len(_step_names(original)) == 4

    out = tmp_path / "fixture"
    report = rf.trim_run_dir(recorded, out, repo_root=recorded.parents[1])
    trimmed = _trace_data(out)
    assert _step_names(trimmed) == _step_names(original)[:2]
    assert report.trace_events_out < report.trace_events_in

    roots = [recorded.parents[1]]
    before = load_trace(find_traces(recorded)[0], roots)
    after = load_trace(find_traces(out)[0], roots)
    assert after.steps == 2
    assert after.step_ms == before.step_ms[:2]
    for summary in (before, after):
        # The user's __getitem__ is among the data loading sites (which one ranks first
        # depends on the machine's load while the fixture was recorded).
        sites = {(loc.file, loc.function) for loc in summary.locations["data_loading"]}
        assert ("train.py", "__getitem__") in sites, sorted(sites)


def test_over_budget_drops_library_frames_without_changing_attribution(
    recorded: Path, tmp_path: Path
) -> None:
    roots = [recorded.parents[1]]
    generous = rf.trim_run_dir(recorded, tmp_path / "whole", repo_root=roots[0])
    tight = rf.trim_run_dir(recorded, tmp_path / "tight", budget_bytes=1, repo_root=roots[0])
    assert generous.library_frames_dropped == 0
    assert tight.library_frames_dropped > 0
    assert tight.files[find_traces(tmp_path / "tight")[0].name] < generous.total_bytes

    data = _trace_data(tmp_path / "tight")
    frames = [e for e in data["traceEvents"] if e.get("cat") == "python_function"]
    assert any(e["name"].startswith("train.py(") for e in frames)
    # numpy's helpers under __getitem__ go; the DataLoader's own frames (ops inside) stay.
    assert not any(e["name"].startswith("numpy/") for e in frames)
    assert any("torch/utils/data/_utils/collate.py" in e["name"] for e in frames)
    kept_ids = {e["args"]["Python id"] for e in frames}
    original_ids = {
        e["args"]["Python id"]
        for e in _trace_data(recorded)["traceEvents"]
        if e.get("cat") == "python_function"
    }
    # Every caller link points at a kept frame, or (for roots) at no frame at all.
    for e in frames:
        parent = e["args"].get("Python parent id")
        assert parent in kept_ids or parent not in original_ids

    whole = load_trace(find_traces(tmp_path / "whole")[0], roots)
    lean = load_trace(find_traces(tmp_path / "tight")[0], roots)
    assert lean.step_ms == whole.step_ms
    assert lean.aten_ops_per_step == whole.aten_ops_per_step
    assert lean.dataloader_ms_per_step == whole.dataloader_ms_per_step
    assert lean.locations.keys() == whole.locations.keys()
    for topic, places in whole.locations.items():
        assert [(p.file, p.line, p.function) for p in lean.locations[topic]] == [
            (p.file, p.line, p.function) for p in places
        ]
        assert [p.share for p in lean.locations[topic]] == pytest.approx(
            [p.share for p in places], rel=1e-6
        )


def test_trimmed_directory_is_small_relative_and_consistent(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixtures" / "runs" / "tiny"
    report = rf.trim_run_dir(recorded, out, max_samples=50, repo_root=recorded.parents[1])
    assert report.total_bytes < rf.BUDGET_BYTES

    spec = json.loads((out / "spec.json").read_text())
    assert spec["cwd"] == "."
    assert spec["target"]["name"] == "train.py"
    assert not Path(spec["run_dir"]).is_absolute() or spec["run_dir"] == str(out)

    manifest = json.loads((out / "manifest.json").read_text())
    assert "progress" not in manifest["artifacts"]
    assert (out / manifest["artifacts"]["trace"]).is_file()
    assert not (out / "progress.jsonl").exists()
    assert (out / "steps.jsonl").read_text() == (recorded / "steps.jsonl").read_text()
    assert len((out / "stdout.log").read_text().splitlines()) == rf.LOG_TAIL_LINES

    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert report.samples_in == 1001
    assert len(rows) <= 50
    assert rows[0]["kind"] == "note"
    cpu_times = [r["t"] for r in rows if r["kind"] == "cpu"]
    assert cpu_times[0] == 0.0 and cpu_times[-1] == pytest.approx(99.9)
    assert cpu_times == sorted(cpu_times)


def test_memory_snapshot_keeps_the_latest_history_and_stays_plain(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({"label": "baseline", "artifacts": {}}))
    entries = [
        {"action": "alloc", "addr": i, "size": 512, "stream": 0, "time_us": i, "frames": []}
        for i in range(5000)
    ]
    segments = [{"device": 0, "address": 0, "total_size": 2 << 20, "blocks": []}]
    snapshot = {"segments": segments, "device_traces": [entries, entries[:10]]}
    (run_dir / "memory_snapshot.pickle").write_bytes(pickle.dumps(snapshot))

    report = rf.trim_run_dir(run_dir, tmp_path / "out", max_memory_entries=1000)
    loaded = load_snapshot(tmp_path / "out" / "memory_snapshot.pickle")
    assert report.memory_entries_dropped == 4000
    assert [e["addr"] for e in loaded["device_traces"][0]] == list(range(4000, 5000))
    assert len(loaded["device_traces"][1]) == 10
    assert loaded["segments"] == segments


def test_further_processes_and_their_records_are_kept_with_relative_paths(tmp_path: Path) -> None:
    """A run with several training processes (torchrun ranks, spawned trainers): each one's
    record under ranks/<k>/, processes.json and compile.json come along, and the scratch run
    directory and the checkout's paths in them become the fixture's."""
    root = tmp_path / "checkout"
    scratch = tmp_path / "scratch" / "baseline"
    (scratch / "ranks" / "1").mkdir(parents=True)
    script = root / "scripts" / "train.py"
    (scratch / "manifest.json").write_text(json.dumps({"label": "baseline", "artifacts": {}}))
    (scratch / "observations.json").write_text(json.dumps({"script": str(script)}))
    (scratch / "compile.json").write_text(json.dumps({"frames": [{"co_filename": str(script)}]}))
    processes = {"processes": [{"record": "."}, {"record": "ranks/1", "dir": str(scratch)}]}
    (scratch / "processes.json").write_text(json.dumps(processes))
    rank1 = scratch / "ranks" / "1"
    (rank1 / "observations.json").write_text(json.dumps({"cwd": str(root), "dist": {"rank": 1}}))
    (rank1 / "steps.jsonl").write_text(json.dumps({"index": 0, "wall_ms": 2.0}) + "\n")
    (rank1 / "stdout.log").write_text("".join(f"line {i}\n" for i in range(500)))

    out = root / "tests" / "fixtures" / "two"
    report = rf.trim_run_dir(scratch, out, repo_root=root)
    assert json.loads((out / "observations.json").read_text()) == {"script": "scripts/train.py"}
    assert json.loads((out / "compile.json").read_text()) == {
        "frames": [{"co_filename": "scripts/train.py"}]
    }
    listed = json.loads((out / "processes.json").read_text())["processes"]
    assert listed == [{"record": "."}, {"record": "ranks/1", "dir": "tests/fixtures/two"}]
    kept = out / "ranks" / "1"
    assert json.loads((kept / "observations.json").read_text()) == {
        "cwd": ".",
        "dist": {"rank": 1},
    }
    assert (kept / "steps.jsonl").read_text() == (rank1 / "steps.jsonl").read_text()
    assert len((kept / "stdout.log").read_text().splitlines()) == rf.LOG_TAIL_LINES
    # The ranks' files count against the budget like the child's own.
    assert "ranks/1/observations.json" in report.files and "compile.json" in report.files
    for path in out.rglob("*"):
        if path.is_file():
            assert str(tmp_path) not in path.read_text(), path


def _x(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_gpu_work_is_kept_by_its_launch_not_by_its_time() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        _x("ProfilerStep#4", "user_annotation", 100, 50),
        _x("ProfilerStep#5", "user_annotation", 150, 50),
        _x("ProfilerStep#6", "user_annotation", 200, 50),
        _x("cudaLaunchKernel", "cuda_runtime", 190, 5, correlation=7),
        _x("cudaLaunchKernel", "cuda_runtime", 210, 5, correlation=8),
        _x("late_kernel_of_step_5", "kernel", 260, 30, correlation=7),
        _x("kernel_of_step_6", "kernel", 220, 10, correlation=8),
        {"ph": "s", "cat": "ac2g", "id": 7, "pid": 1, "tid": 1, "ts": 190},
        {"ph": "f", "cat": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 260, "bp": "e"},
        {"ph": "s", "cat": "ac2g", "id": 8, "pid": 1, "tid": 1, "ts": 210},
        _x("aten::mm", "cpu_op", 50, 10),
    ]
    kept = rf.trim_trace_window({"traceEvents": events}, keep_steps=2)["traceEvents"]
    names = [e.get("name") for e in kept]
    assert "late_kernel_of_step_5" in names
    assert "kernel_of_step_6" not in names
    assert "ProfilerStep#6" not in names
    assert "aten::mm" not in names
    assert "process_name" in names
    assert sorted(e["id"] for e in kept if e.get("cat") == "ac2g") == [7, 7]


def test_readme_has_one_line_per_fixture(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    rf.update_readme(readme, "cnn_cpu", "- `cnn_cpu`: first")
    rf.update_readme(readme, "gpt_cpu", "- `gpt_cpu`: only")
    rf.update_readme(readme, "cnn_cpu", "- `cnn_cpu`: second")
    lines = readme.read_text().splitlines()
    assert lines[0] == "# Recorded run directories"
    assert [line for line in lines if line.startswith("- ")] == [
        "- `gpt_cpu`: only",
        "- `cnn_cpu`: second",
    ]


def test_readme_line_says_how_the_run_was_recorded() -> None:
    manifest = SimpleNamespace(device=None, versions={"torch": "2.x"}, status="completed")
    plan = rf.StepPlan(warmup_steps=2, timed_steps=6, profiled_steps=2)
    how = ["OMP_NUM_THREADS=1", "--nproc-per-node", "2", "--", "--slow-rank", "1"]
    line = rf.readme_line("two_cpu", Path("scripts/ddp.py"), manifest, plan, 12, how)
    assert line.startswith(
        "- `two_cpu`: `scripts/ddp.py` (`OMP_NUM_THREADS=1 --nproc-per-node 2 -- --slow-rank 1`)"
        " on unknown device, torch 2.x, recorded "
    )
    assert line.endswith("plan 2+6+2 steps, status completed, 12 KB gzipped.")
    # An --env without "=" is refused before anything runs (the script exists).
    assert rf.main([str(TOOL), "--out", "unused", "--env", "NO_EQUALS_SIGN"]) == 2


def test_record_runs_a_sample_model_under_the_launcher(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "tuned_cpu"
    code = rf.main(
        [
            str(TOOL.parents[1] / "sample_models" / "tuned_mlp.py"),
            "--out",
            str(out),
            "--warmup",
            "1",
            "--steps",
            "2",
            "--profiled",
            "2",
            "--",
            "--device",
            "cpu",
            "--rows",
            "4096",
            "--val-rows",
            "256",
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["steps_seen"] >= 5
    assert _step_names(_trace_data(out)) != []
    assert [json.loads(line)["phase"] for line in (out / "steps.jsonl").read_text().splitlines()][
        :6
    ] == ["warmup", "timed", "timed", "profiler_warmup", "profiled", "profiled"]
    # Nothing of the recording machine's checkout path is left in the fixture.
    root = str(TOOL.parents[1])
    for path in out.iterdir():
        raw = path.read_bytes()
        text = gzip.decompress(raw) if path.name.endswith(".gz") else raw
        assert root.encode() not in text, path.name
    readme = (out.parent / "README.md").read_text()
    assert "- `tuned_cpu`: `" in readme
    assert "torch " in readme and "status completed" in readme
