"""load_run + derive_facts + series_for over a hand-built run directory."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from perfdoctor import rundir
from perfdoctor.analyze.fact_catalog import FACTS, LOCATION_TOPICS
from perfdoctor.analyze.facts import derive_facts, fact_values
from perfdoctor.analyze.record import load_run
from perfdoctor.analyze.series import series_for
from perfdoctor.errors import BadRunDir, CorruptArtifact
from perfdoctor.model import Facts

from .run_dir_builder import TIMED_WALL_MS, build_run_dir, rewrite_json


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return build_run_dir(tmp_path)


@pytest.fixture
def facts(run: Path) -> Facts:
    return derive_facts(load_run(run))


def test_load_run_reads_every_artifact(run: Path) -> None:
    record = load_run(run)
    assert record.spec is not None and record.spec.label == "baseline"
    assert record.manifest is not None and record.manifest.status == "completed"
    assert len(record.steps) == 7 and len(record.timed_steps) == 4
    assert record.observations["optimizers"][0]["class"] == "Adam"
    assert record.trace is not None and record.trace.steps == 2
    assert record.memory is not None and record.memory.peak_allocated_bytes == 8680
    assert len(record.samples) == 13 and len(record.progress) == 7


def test_missing_artifacts_load_as_none(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    for name in (rundir.OBSERVATIONS_FILE, rundir.SAMPLES_FILE, rundir.STEPS_FILE):
        (run / name).unlink()
    record = load_run(run)
    assert record.trace is None and record.memory is None
    assert record.observations == {} and record.steps == () and record.samples == ()
    facts = derive_facts(record)
    assert facts.get("gpu_busy_frac") is None and facts.get("step_ms_p50") is None
    assert facts.get("steps_timed") == 0


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(BadRunDir, match="not a perfdoctor run directory"):
        load_run(tmp_path)
    with pytest.raises(BadRunDir, match="not a directory"):
        load_run(tmp_path / "nothing-here")


@pytest.mark.parametrize("name", [rundir.MANIFEST_FILE, rundir.SPEC_FILE, rundir.OBSERVATIONS_FILE])
def test_corrupt_json_artifact_names_the_file(run: Path, name: str) -> None:
    (run / name).write_text("{ half a json")
    with pytest.raises(CorruptArtifact, match=re.escape(name)):
        load_run(run)


def test_corrupt_trace_names_the_file(run: Path) -> None:
    trace = next(run.glob("*.pt.trace.json"))
    trace.write_text("[{]")
    with pytest.raises(CorruptArtifact, match=re.escape(trace.name)):
        load_run(run)


def test_a_torn_last_step_line_is_skipped(run: Path) -> None:
    with (run / rundir.STEPS_FILE).open("a") as fh:
        fh.write('{"index": 7, "phase": "pro')
    assert len(load_run(run).steps) == 7


def test_the_newest_of_several_traces_is_analysed(run: Path, fixtures: Path) -> None:
    older = run / "host_4242.1000.pt.trace.json"
    older.write_bytes((fixtures / "cpu_array_form.json").read_bytes())
    record = load_run(run)
    assert record.trace is not None and record.trace.steps == 2
    assert record.trace.gpu is not None  # the cuda fixture has the larger timestamp
    assert any("2 traces" in n for n in record.notes)


def test_every_fact_is_documented_and_present(run: Path, facts: Facts) -> None:
    produced = fact_values(load_run(run))
    assert set(produced) <= set(FACTS), sorted(set(produced) - set(FACTS))
    assert set(facts.values) == set(FACTS)
    for value in facts.values.values():
        assert value is None or isinstance(value, (bool, int, float, str))
        assert not (isinstance(value, float) and not math.isfinite(value))
    assert set(facts.locations) <= set(LOCATION_TOPICS)


def test_step_facts_use_the_timed_phase_only(facts: Facts) -> None:
    walls = sorted(TIMED_WALL_MS)
    assert facts.get("steps_timed") == 4
    assert facts.get("step_ms_p50") == pytest.approx(115.0)
    assert facts.get("step_ms_p90") == pytest.approx(120 + 0.7 * 80)
    assert facts.get("step_ms_mean") == pytest.approx(sum(walls) / 4)
    assert facts.get("step_jitter_ratio") == pytest.approx(176 / 115)
    # Shares of the median step (115 ms) from the per-phase medians.
    assert facts.get("data_wait_frac") == pytest.approx(10 / 115)
    assert facts.get("forward_frac") == pytest.approx(30 / 115)
    assert facts.get("backward_frac") == pytest.approx(40 / 115)
    assert facts.get("optimizer_frac") == pytest.approx(10 / 115)
    assert facts.get("other_frac") == pytest.approx(1 - 90 / 115)
    assert facts.get("data_wait_ms_p50") == pytest.approx(10.0)
    assert facts.get("micro_batches_per_step") == pytest.approx(1.0)
    assert facts.get("batch_size") == 8
    # Median-based, as every variant's: 8 samples per median step.
    assert facts.get("throughput_samples_s") == pytest.approx(8 / 0.115)
    assert facts.get("rss_growth_bytes_per_step") == pytest.approx(100.0)
    assert facts.get("rss_bytes_max") == 1500
    assert facts.get("cuda_allocated_growth_bytes_per_step") == pytest.approx(0.0, abs=1e-6)
    assert facts.get("loss_is_finite") is True


def test_a_nan_loss_anywhere_is_reported(run: Path) -> None:
    with (run / rundir.STEPS_FILE).open("a") as fh:
        fh.write('{"index": 7, "phase": "profiled", "wall_ms": 1.0, "loss": NaN}\n')
    assert derive_facts(load_run(run)).get("loss_is_finite") is False


def test_observation_facts(facts: Facts) -> None:
    expected = {
        "device_is_cuda": True,
        "gpu_compute_capability": 9.0,
        "device_total_memory_bytes": 85029158912,
        "cpu_cores_logical": 16,
        "step_detection": "optimizer",
        "dataloader_count": 2,
        "dataloader_num_workers": 0,  # the loader that fed the most batches
        "torch_num_threads": 1,
        "anomaly_detection_enabled": True,
        "grad_forwards_without_backward": 3,
        "grad_forwards_without_backward_frac": pytest.approx(0.3),
        "autocast_used": True,
        "autocast_dtype": "bfloat16",
        "optimizer_class": "Adam",
        "optimizer_impl": "single_tensor",
        "zero_grad_set_to_none": False,
        "model_param_count": 900,
        "model_conv_count": 3,
        "model_channels_last": False,
        "conv_bias_before_bn_count": 2,
        "uses_ddp": False,
        "world_size": 1,
    }
    for name, value in expected.items():
        assert facts.get(name) == value, name


def test_memory_facts_take_the_larger_of_snapshot_and_child_peaks(facts: Facts) -> None:
    assert facts.get("peak_allocated_bytes") == 9000  # child's max_memory_allocated
    assert facts.get("peak_reserved_bytes") == 12288  # the snapshot's
    assert facts.get("peak_allocated_frac") == pytest.approx(9000 / 85029158912)
    assert facts.get("fragmentation_frac") == pytest.approx((12288 - 8680) / 12288)
    assert facts.get("oom_events") == 1  # the snapshot's oom entry; memory_stats said 0
    assert facts.get("alloc_retries") == 3  # memory_stats: the snapshot has no such count
    assert facts.get("activation_bytes_frac") == pytest.approx(6144 / 8680)
    assert facts.get("memory_history_truncated") is False


def test_trace_and_sample_facts(facts: Facts) -> None:
    assert facts.get("gpu_busy_frac") == pytest.approx(460 / 2000)  # on the GPU window
    assert facts.get("host_syncs_per_step") == pytest.approx(1.0)
    assert facts.get("tensor_core_kernel_frac") == pytest.approx(200 / 390)
    assert facts.get("memcpy_dtod_ms_per_step") == pytest.approx(0.0)
    assert facts.get("kernel_launches_per_step") == pytest.approx(2.5)
    assert facts.get("misaligned_lowp_gemm_count") == 1
    assert facts.get("single_tensor_optimizer") is True
    assert facts.get("energy_j_per_step") == pytest.approx(200.0)
    assert facts.get("gpu_util_mean_frac") == pytest.approx(0.8)
    assert facts.get("child_cpu_busy_cores") == pytest.approx(1.2)


def test_locations_by_topic(facts: Facts) -> None:
    locs = facts.locations
    assert locs["host_sync"][0].function == "train_step"
    assert locs["data_loading"][0].function == "__getitem__"
    assert [x.line for x in locs["dataloader_construct"]] == [44, 40]
    assert locs["optimizer_construct"][0].line == 52
    assert locs["grad_without_backward"][0].count == 3
    assert locs["debug_mode"][0].line == 12
    # A share of the peak's bytes, said in words: renderers read `share` as time.
    assert locs["memory_peak"][0].line == 12 and locs["memory_peak"][0].share is None
    assert "47.2% of the peak" in (locs["memory_peak"][0].call or "")


def test_host_sync_lines_seen_at_the_call_come_first_and_replace_the_traced_function(
    run: Path,
) -> None:
    traced = derive_facts(load_run(run)).locations["host_sync"][0]
    site = {"file": traced.file, "line": traced.line + 7, "function": traced.function}
    other = {"file": "train.py", "line": 90, "function": "log_metrics"}
    rewrite_json(
        run / rundir.OBSERVATIONS_FILE,
        host_sync_calls={
            "steps_watched": 2,
            "calls": 6,
            "sites": [
                {**site, "call": ".item()", "calls": 4, "count": 2},
                {**other, "call": "torch.cuda.synchronize()", "calls": 2, "count": 1},
            ],
            "failed": None,
        },
    )
    locs = derive_facts(load_run(run)).locations["host_sync"]
    assert (locs[0].line, locs[0].call, locs[0].count) == (traced.line + 7, ".item()", 2)
    assert str(locs[1]).endswith("(log_metrics): torch.cuda.synchronize()")
    # The trace's line for the same function (its first line) is not shown beside the exact one.
    assert all((x.function, x.line) != (traced.function, traced.line) for x in locs)


def test_settings_carry_the_raw_configuration_and_warnings(facts: Facts) -> None:
    s = facts.settings
    assert s["dataloader"]["batch_size"] == 8
    assert s["optimizer"]["class"] == "Adam"
    assert "the script set anomaly detection" in s["warnings"]
    assert "manifest warning" in s["warnings"]
    assert any("pcie" in w for w in s["warnings"])
    assert s["trace"]["op_share_basis"] == "gpu_kernel_time"


def test_series_for_one_run(run: Path) -> None:
    series = series_for(load_run(run))
    assert series["steps"]["index"] == list(range(7))
    assert series["steps"]["phase"][:3] == ["warmup", "warmup", "timed"]
    assert series["breakdown_ms"] == pytest.approx(
        {"data": 10.0, "forward": 30.0, "backward": 40.0, "optimizer": 10.0, "other": 25.0}
    )
    samples = series["samples"]
    assert len(samples["t"]) == len(samples["cpu_util"]) == len(samples["power_w"]) == 7
    # t = 1.0 has a GPU row only, t = 1.1 a CPU row only, t = 1.3 both
    assert samples["cpu_util"][0] is None and samples["gpu_util"][0] == pytest.approx(0.8)
    assert samples["gpu_util"][1] is None and samples["cpu_util"][1] == pytest.approx(0.75)
    assert samples["power_w"][2] == pytest.approx(300.0) and samples["rss_bytes"][2] == 2000
    memory = series["memory"]
    assert memory["allocated_bytes"][memory["peak_index"]] == 8680


def test_manifest_without_device_falls_back_to_observations_and_trace(run: Path) -> None:
    rewrite_json(run / rundir.MANIFEST_FILE, device=None)
    facts = derive_facts(load_run(run))
    assert facts.get("gpu_compute_capability") == pytest.approx(9.0)  # trace deviceProperties
    assert facts.get("device_total_memory_bytes") == 85029158912  # observations


def test_sample_series_carry_the_runs_own_cpu_share() -> None:
    from perfdoctor.analyze.series import _sample_series
    from perfdoctor.run_schema import sample_row

    rows = [
        {"kind": "cpu", "t": 0.1, "cpu_percent": [100.0, 100.0], "child_cpu_percent": 60.0},
        {
            "kind": "cpu",
            "t": 0.2,
            "cpu_percent": [100.0, 100.0],
            "child_cpu_percent": 50.0,
            "workers_cpu_percent": 70.0,
        },
    ]
    out = _sample_series([sample_row(r) for r in rows])
    assert out["cpu_util"] == [1.0, 1.0]
    assert out["run_cpu_util"] == pytest.approx([0.3, 0.6])


def test_a_run_that_ended_before_the_profiler_window_says_so() -> None:
    from perfdoctor.analyze.facts import profiler_window_missed

    plan = {
        "warmup_steps": 5,
        "timed_steps": 20,
        "profiler_warmup_steps": 1,
        "profiled_steps": 3,
        "total_steps": 29,
    }
    obs = {
        "plan": plan,
        "steps_seen": 20,  # LBFGS: 20 closure evaluations, one optimizer.step call
        "profiler": {"requested": True, "started": False, "user_profiler": False},
    }
    note = profiler_window_missed(obs)
    assert note is not None and "ended after 20 steps" in note and "27-29" in note
    assert profiler_window_missed({**obs, "steps_seen": 29}) is None
    assert profiler_window_missed({**obs, "profiler": {"requested": False}}) is None


def test_the_training_loader_is_the_one_that_fed_the_most_steps() -> None:
    """minGPT's adder evaluates its whole training set at iteration 0: its evaluation loader
    (num_workers=0) fed 95 batches inside one step, the training loader (4 workers) one per
    step. The training loader's settings are the ones the rules read."""
    from perfdoctor.analyze.facts import _training_dataloader
    from perfdoctor.run_schema import DataLoaderInfo, Observations

    evaluation = DataLoaderInfo(num_workers=0, batches=95, steps_fed=1)
    training = DataLoaderInfo(num_workers=4, batches=29, steps_fed=29)
    obs = Observations(dataloaders=[evaluation, training])
    assert _training_dataloader(obs) is training
    # Without the step count (an older run directory) the batches decide, as before.
    old = Observations(dataloaders=[DataLoaderInfo(batches=95), DataLoaderInfo(batches=29)])
    loader = _training_dataloader(old)
    assert loader is not None and loader.batches == 95
