"""What the child measures in real training scripts: steps, losses, profiler, observations."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import psutil
import pytest
from test_child_launch import (
    SCRIPTS,
    SMALL_PLAN,
    ChildRun,
    run_child,
    sliced_run_that_exits_3,
)

from perfdoctor import rundir
from perfdoctor.model import StepPlan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def accumulation_run(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """Gradient accumulation over a DataLoader with two fork workers (which change nothing
    in the steps): the accumulation test and the [fork] case of the workers test."""
    return run_child(
        tmp_path_factory.mktemp("accumulation"),
        "train_loop.py",
        *("--accum", "4", "--epochs", "5", "--workers", "2", "--mp-context", "fork"),
    )


@pytest.fixture(scope="module")
def forever_run(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """A loop that never ends by itself inside `except Exception`, with anomaly mode and
    zero_grad(set_to_none=False) left on and a spawn DataLoader worker (one: each imports
    torch anew): the stop, the debug settings and the [spawn] case of the workers test read
    this one child."""
    return run_child(
        tmp_path_factory.mktemp("forever"),
        "train_loop.py",
        *("--forever", "--catch", "--debug-modes", "--workers", "1", "--mp-context", "spawn"),
    )


def test_gradient_accumulation_reports_micro_batches_per_step(accumulation_run: ChildRun) -> None:
    run = accumulation_run
    assert run.returncode == 0, run.output
    assert [row["micro_batches"] for row in run.steps] == [4, 4, 4, 4]
    assert run.observations["step_detection"] == "optimizer"
    assert run.observations["dataloaders"][0]["batches"] == 16


def test_two_optimizers_count_iterations_not_optimizer_calls(tmp_path: Path) -> None:
    run = run_child(tmp_path, "gan.py")
    assert run.returncode == 0, run.output
    steps = run.steps
    assert len(steps) == SMALL_PLAN.total_steps
    assert all(row["micro_batches"] == 2 for row in steps)  # D and G backward each
    obs = run.observations
    assert [opt["steps"] for opt in obs["optimizers"]] == [4, 4]
    assert len(obs["roots"]) == 2  # generator and discriminator
    # Each model sees one shape: noise for G, images for D. Together that is no shape change.
    assert obs["inputs"]["distinct_shapes_after_warmup"] == 1
    assert sorted(obs["inputs"]["distinct_shapes_per_root"]) == [1, 1]


def test_no_optimizer_falls_back_to_backward_calls(tmp_path: Path) -> None:
    run = run_child(tmp_path, "no_optimizer.py")
    assert run.returncode == 0, run.output
    assert run.observations["step_detection"] == "backward"
    assert [row["micro_batches"] for row in run.steps] == [1, 1, 1, 1]
    assert all(row["optimizer_ms"] is None for row in run.steps)


def test_forward_only_script_is_measured_in_time_windows(tmp_path: Path) -> None:
    run = run_child(tmp_path, "no_optimizer.py", "--forward-only", time_window_s=0.2)
    assert run.returncode == 0, run.output
    obs = run.observations
    assert obs["step_detection"] == "time"
    assert obs["stopped_by_perfdoctor"] is True
    steps = run.steps
    assert len(steps) == SMALL_PLAN.total_steps
    assert all(row["wall_ms"] >= 200 for row in steps)
    assert all(row["micro_batches"] == 0 for row in steps)


@pytest.mark.parametrize(
    ("context", "workers", "run_name"),
    [("fork", 2, "accumulation_run"), ("spawn", 1, "forever_run")],
)
def test_dataloader_workers_with_a_dataset_class_from_the_script_leave_no_orphans(
    request: pytest.FixtureRequest, context: str, workers: int, run_name: str
) -> None:
    run: ChildRun = request.getfixturevalue(run_name)
    assert run.returncode == 0, run.output
    assert run.observations["stopped_by_perfdoctor"] is True
    loader = run.observations["dataloaders"][0]
    assert (loader["num_workers"], loader["dataset_class"]) == (workers, "RandomPairs")
    assert loader["multiprocessing_context"] == context
    assert len(run.steps) == SMALL_PLAN.total_steps
    spec_path = str(run.run_dir / rundir.SPEC_FILE)
    leftovers = [
        p for p in psutil.process_iter(["cmdline"]) if spec_path in (p.info["cmdline"] or [])
    ]
    assert leftovers == []


def test_a_script_that_would_run_forever_is_stopped_after_the_plan_through_except_exception(
    forever_run: ChildRun,
) -> None:
    """The loop never ends by itself, and an `except Exception` around it (which prints
    "caught") must neither swallow the stop nor see it."""
    run = forever_run
    assert run.returncode == 0, run.output
    assert "caught" not in run.stdout
    obs = run.observations
    assert (obs["stopped_by_perfdoctor"], obs["plan_complete"]) == (True, True)
    assert [row["phase"] for row in run.steps] == ["warmup", "timed", "timed", "timed"]
    # Where: the step that would have begun next, at the script's own line.
    assert obs["stopped_at"]["step"] == 4
    assert obs["stopped_at"]["location"]["file"].endswith("train_loop.py")


PROFILED_PLAN = StepPlan(warmup_steps=1, timed_steps=2, profiled_steps=2)


@pytest.fixture(scope="module")
def profiled_amp_run(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """bf16 autocast with a GradScaler and a profiled window: the scaler changes neither the
    steps nor the profiler, so the trace test and the unscaled-loss test read one child."""
    return run_child(tmp_path_factory.mktemp("amp"), "amp_scaler.py", plan=PROFILED_PLAN)


def test_profiled_window_writes_a_gzipped_trace_of_exactly_the_profiled_steps(
    profiled_amp_run: ChildRun,
) -> None:
    plan, run = PROFILED_PLAN, profiled_amp_run
    assert run.returncode == 0, run.output
    # The profiler starts (kineto's WARMUP) in an untimed step of its own, not a timed one.
    assert [row["phase"] for row in run.steps] == [
        "warmup",
        "timed",
        "timed",
        "profiler_warmup",
        "profiled",
        "profiled",
    ]
    assert run.observations["plan"]["profiler_warmup_steps"] == 1
    assert run.observations["plan"]["total_steps"] == plan.total_steps == 6
    traces = rundir.find_traces(run.run_dir)
    assert len(traces) == 1 and traces[0].name.endswith(".pt.trace.json.gz")
    assert run.observations["profiler"]["trace_files"] == [traces[0].name]
    with gzip.open(traces[0], "rt") as fh:
        events = json.load(fh)["traceEvents"]
    step_spans = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    # = steps.jsonl indices. On a busy machine the first recorded step can pass the window's
    # slow-step limit (profiler_window.py), which then closes it early and says so: the
    # trace holds exactly the steps the window says it recorded.
    dropped = run.observations["profiler"].get("dropped_steps", 0)
    assert dropped in (0, 1)
    assert step_spans == ["ProfilerStep#4", "ProfilerStep#5"][: 2 - dropped]
    if dropped:
        assert "recorded 1 of 2 steps" in run.observations["profiler"]["dropped_why"]
    # Loss: the value the script saw, captured without a per-step .item().
    printed = [
        float(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("loss ")
    ]
    captured = [row["loss"] for row in run.steps]
    assert captured == pytest.approx(printed[: len(captured)], rel=1e-6, abs=1e-8)


def test_grad_scaler_loss_is_captured_unscaled_and_autocast_is_seen(
    profiled_amp_run: ChildRun,
) -> None:
    run = profiled_amp_run
    assert run.returncode == 0, run.output
    printed = [
        float(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("loss ")
    ]
    captured = [row["loss"] for row in run.steps]
    assert captured == pytest.approx(printed[: len(captured)], rel=1e-6, abs=1e-8)
    autocast = run.observations["autocast"]
    assert (autocast["used"], autocast["dtype"], autocast["grad_scaler"]) == (
        True,
        "bfloat16",
        True,
    )


def test_evaluation_without_no_grad_is_counted_at_its_line(tmp_path: Path) -> None:
    plan = StepPlan(warmup_steps=1, timed_steps=30, profiled_steps=0)
    run = run_child(
        tmp_path,
        "train_loop.py",
        "--epochs",
        "2",
        "--samples",
        "16",
        "--eval-without-no-grad",
        plan=plan,
    )
    assert run.returncode == 0, run.output
    forwards = run.observations["forwards"]
    assert forwards["grad_without_backward"] == 8  # 2 evaluations x 4 batches
    eval_line = _line_of(SCRIPTS / "train_loop.py", "EVAL-LINE")
    assert forwards["locations"] == [
        {"file": "train_loop.py", "line": eval_line, "function": "evaluate", "count": 8}
    ]
    assert all(math.isfinite(row["loss"]) for row in run.steps)


@pytest.fixture(scope="module")
def lstm_own_profiler_run(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """A time-major LSTM trained inside the script's own torch.profiler, under a plan that
    asks for a profiled window: the batch-size test's [--lstm] case and the back-off test."""
    return run_child(
        tmp_path_factory.mktemp("lstm"),
        "batch_shapes.py",
        *("--lstm", "--own-profiler"),
        plan=PROFILED_PLAN,
    )


def test_a_users_own_profiler_makes_perfdoctor_back_off(lstm_own_profiler_run: ChildRun) -> None:
    run = lstm_own_profiler_run
    assert run.returncode == 0, run.output
    profiler = run.observations["profiler"]
    assert profiler["user_profiler"] is True
    assert profiler["started"] is False
    assert rundir.find_traces(run.run_dir) == []


def printed_losses(stdout: str) -> list[float]:
    return [float(line.split()[1]) for line in stdout.splitlines() if line.startswith("loss ")]


def _line_of(path: Path, marker: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def test_debug_settings_are_observed_with_the_lines_that_set_them(forever_run: ChildRun) -> None:
    run = forever_run
    assert run.returncode == 0, run.output
    obs = run.observations
    assert obs["torch"]["anomaly_enabled"] is True
    assert obs["zero_grad"] == {"calls": 4, "set_to_none": False}
    script = SCRIPTS / "train_loop.py"
    locations = obs["locations"]
    assert [(loc["line"], loc["function"]) for loc in locations["debug_mode"]] == [
        (_line_of(script, "DEBUG-LINE"), "train")
    ]
    assert [(loc["line"], loc["count"]) for loc in locations["zero_grad"]] == [
        (_line_of(script, "ZERO-GRAD-LINE"), 4)
    ]


def test_the_whole_model_saves_and_deep_copies_under_perfdoctor(tmp_path: Path) -> None:
    """torch.save(model) and copy.deepcopy(model) (EMA) after the roots are hooked; the
    copies carry none of perfdoctor's hooks, and the script's own hook handle still works.
    One child, two models: one without a hook of the script's (its copies carry no forward
    hook at all), one with a hook the script removes through its handle."""
    run = run_child(tmp_path, "save_and_copy.py")
    assert run.returncode == 0, run.output
    assert "step 3 saved and copied" in run.stdout
    assert run.observations["forwards"]["hooks"] == "per-root"
    assert len(run.steps) == SMALL_PLAN.total_steps
    assert all(row["forward_ms"] is not None for row in run.steps)


@pytest.mark.parametrize(("flag", "batch"), [("--slice", 10), ("--lstm", 20)])
def test_the_batch_size_is_what_the_model_received(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    flag: str,
    batch: int,
) -> None:
    """Not the DataLoader's batch_size (50, sliced by the script), nor a time-major
    sequence model's first dimension (35 time steps)."""
    if flag == "--lstm":
        run: ChildRun = request.getfixturevalue("lstm_own_profiler_run")
        assert run.returncode == 0, run.output
    else:
        run = sliced_run_that_exits_3(tmp_path_factory)
        assert run.returncode == 3, run.output  # the script's own sys.exit(3), after training
    sizes = [row["batch_size"] for row in run.steps]
    # (A step that a repeated optimizer step opened saw no forward of its own: None.)
    assert {size for size in sizes if size is not None} == {batch}
    assert sizes.count(batch) >= len(sizes) // 2


def test_a_closure_optimizer_times_each_closure_call_and_opens_the_profiler(
    tmp_path: Path,
) -> None:
    """LBFGS with max_iter=20 and one optimizer.step(closure) call: 20 forward/backward
    evaluations inside one call. Each is a step, so the plan is timed and profiled."""
    plan = StepPlan(warmup_steps=2, timed_steps=4, profiled_steps=2)
    run = run_child(tmp_path, "lbfgs.py", plan=plan)
    assert run.returncode == 0, run.output
    obs = run.observations
    assert obs["step_detection"] == "optimizer"
    assert "closure" in obs["step_detection_note"]
    assert obs["stopped_by_perfdoctor"] is True
    timed = [row for row in run.steps if row["phase"] == "timed"]
    assert len(timed) == 4
    assert all(row["micro_batches"] == 1 and row["forward_ms"] is not None for row in timed)
    assert all((row["optimizer_ms"] or 0.0) <= row["wall_ms"] for row in run.steps)
    assert obs["profiler"]["trace_files"], obs["profiler"]
    assert len(obs["roots"]) == 1
