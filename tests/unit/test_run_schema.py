"""The run directory's typed schemas (perfdoctor/run_schema.py): what the live side writes
decodes on the offline side, old runs load, a run that cannot be decoded fails in one line
naming its schema version, and docs/run-directory.md matches the structs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

from perfdoctor import errors, run_schema, rundir
from perfdoctor.analyze.facts import derive_facts, fact_values, profiler_window_missed
from perfdoctor.analyze.record import load_run
from perfdoctor.cli import app
from perfdoctor.model import StepRecord
from perfdoctor.run_schema_doc import replace_section, schema_tables
from tests.unit.analyze.run_dir_builder import build_run_dir, rewrite_json

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
FIXTURE_RUNS = sorted(p for p in RUNS.iterdir() if p.is_dir())
GOLDEN = ROOT / "tests" / "unit" / "analyze" / "fixtures" / "observation_facts.json"


# --------------------------------------------------------------------------- the doc


def test_the_docs_field_tables_are_the_structs() -> None:
    doc = (ROOT / "docs" / "run-directory.md").read_text()
    assert replace_section(doc, schema_tables()) == doc, (
        "docs/run-directory.md is out of date: run python tools/gen_run_schema_doc.py"
    )


def test_the_tables_name_every_field_of_a_nested_struct() -> None:
    tables = schema_tables()
    for name in ("`DataLoaderInfo`", "`SourceLine`", "`GpuSample`", "`StepRecord`"):
        assert f"#### {name}" in tables
    assert "| `class` | str |" in tables  # the JSON name, not the Python one


# --------------------------------------------------------------------------- round trips


def test_a_step_row_written_by_the_child_decodes_to_the_same_step() -> None:
    row = {"index": 3, "phase": "timed", "wall_ms": 12.5, "loss": 0.25, "micro_batches": 2}
    line = run_schema.encode_line(run_schema.step_row(row))
    step = run_schema.decode_step_line(line)
    assert step == StepRecord(index=3, phase="timed", wall_ms=12.5, loss=0.25, micro_batches=2)


def test_a_step_row_of_the_wrong_type_is_refused_at_both_ends() -> None:
    with pytest.raises(run_schema.SchemaMismatch, match="wall_ms"):
        run_schema.step_row({"index": 0, "phase": "timed", "wall_ms": "fast"})
    with pytest.raises(run_schema.SchemaMismatch, match="phase"):
        run_schema.decode_step_line(b'{"index": 0, "phase": "later", "wall_ms": 1.0}')
    with pytest.raises(msgspec.DecodeError):
        run_schema.decode_step_line(b'{"index": 0, "pha')  # torn: not a mismatch


def test_every_sample_kind_round_trips() -> None:
    rows = [
        {"kind": "clock", "t": 0.0, "unix_s": 1795322619.87},
        {"kind": "note", "t": 0.0, "message": "NVML unavailable"},
        {"kind": "cpu", "t": 0.1, "cpu_percent": [12.0, 99], "rss_bytes": 123, "workers": 2},
        {"kind": "gpu", "t": 0.1, "index": 0, "util_gpu": 97, "power_w": 412.3},
        {"kind": "gpu_info", "t": 0.1, "index": 0, "nvml_index": None, "name": "H100"},
    ]
    for row in rows:
        decoded = msgspec.json.decode(run_schema.encode_line(run_schema.sample_row(row)))
        assert decoded == {k: v for k, v in row.items() if v is not None}
        assert run_schema.known_sample(decoded) == run_schema.sample_row(row)


def test_a_sampler_field_the_schema_lacks_is_not_dropped_silently() -> None:
    with pytest.raises(run_schema.SchemaMismatch, match="fan_speed"):
        run_schema.sample_row({"kind": "gpu", "t": 0.1, "index": 0, "fan_speed": 40})


def test_samples_of_a_kind_this_perfdoctor_does_not_know_are_skipped() -> None:
    assert run_schema.known_sample({"kind": "tpu", "t": 0.1, "util": "high"}) is None
    with pytest.raises(run_schema.SchemaMismatch, match="util_gpu"):
        run_schema.known_sample({"kind": "gpu", "t": 0.1, "index": 0, "util_gpu": "high"})


def test_the_progress_line_the_child_writes_decodes(tmp_path: Path) -> None:
    from perfdoctor.collect.step_log import StepLog

    log = StepLog(tmp_path, origin=100.0)
    log.progress(4, "timed", 12.34567, now=101.5)
    log.close()
    (line,) = (tmp_path / rundir.PROGRESS_FILE).read_bytes().splitlines()
    row = run_schema.progress_row(msgspec.json.decode(line))
    assert row == run_schema.ProgressRow(step=4, phase="timed", t=1.5, wall_ms=12.3457)


def test_the_step_log_writes_rows_through_the_schema(tmp_path: Path) -> None:
    from perfdoctor.collect.step_log import StepLog

    log = StepLog(tmp_path, origin=0.0)
    row = {"index": 0, "phase": "warmup", "wall_ms": 5.0, "micro_batches": 1, "batch_size": 8}
    log.add(row, ())
    log.close()
    (line,) = (tmp_path / rundir.STEPS_FILE).read_bytes().splitlines()
    assert run_schema.decode_step_line(line) == StepRecord(
        index=0, phase="warmup", wall_ms=5.0, batch_size=8
    )


# --------------------------------------------------------------------------- observations


def test_observations_decode_typed_and_ignore_unknown_keys() -> None:
    obs = run_schema.observations(
        {
            "dataloaders": [{"num_workers": 2, "location": {"file": "t.py", "line": 3}}],
            "optimizers": [{"class": "AdamW", "impl": "fused", "lr": 0.001}],
            "a_key_from_a_newer_perfdoctor": {"anything": [1, 2]},
            "torch": {"num_threads": 4, "a_new_setting": True},
        }
    )
    assert obs.dataloaders is not None and obs.dataloaders[0].num_workers == 2
    assert obs.dataloaders[0].location == run_schema.SourceLine(file="t.py", line=3)
    assert obs.optimizers is not None and obs.optimizers[0].class_name == "AdamW"
    assert obs.torch == run_schema.TorchSettings(num_threads=4)
    assert obs.cpu is None


def test_profiler_window_missed_reads_typed_and_plain_observations() -> None:
    plain = {
        "steps_seen": 12,
        "plan": {"warmup_steps": 5, "timed_steps": 20, "profiler_warmup_steps": 1},
        "profiler": {"requested": True, "started": False},
    }
    plain["plan"]["profiled_steps"] = 3  # type: ignore[index]
    note = profiler_window_missed(plain)
    assert note is not None and "after 12 steps" in note
    assert profiler_window_missed(run_schema.observations(plain)) == note


# --------------------------------------------------------------------------- run directories


@pytest.mark.parametrize("run", FIXTURE_RUNS, ids=lambda p: p.name)
def test_the_committed_fixture_runs_still_load(run: Path) -> None:
    record = load_run(run)
    assert record.manifest is not None and record.manifest.schema_version is None  # before 2
    assert record.steps and record.samples
    assert record.observed.torch is not None and record.observed.torch.num_threads


@pytest.mark.parametrize("run", FIXTURE_RUNS, ids=lambda p: p.name)
def test_observation_facts_are_those_of_the_untyped_reader(run: Path) -> None:
    """Values recorded with the .get()-chain reader this schema replaced."""
    golden = json.loads(GOLDEN.read_text())[run.name]
    record = load_run(run)
    values = fact_values(record)
    assert {k: values.get(k) for k in golden["facts"]} == golden["facts"]
    facts = derive_facts(record)
    assert facts.settings["dataloader"] == golden["training_dataloader"]
    located = {
        topic: [
            {k: v for k, v in rundir.to_jsonable(loc).items()}
            for loc in facts.locations.get(topic, ())
        ]
        for topic in golden["child_locations"]
    }
    assert located == golden["child_locations"]


def test_a_new_run_records_its_schema_version(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path)
    rewrite_json(run / rundir.MANIFEST_FILE, schema_version=run_schema.RUN_SCHEMA_VERSION)
    assert load_run(run).manifest.schema_version == run_schema.RUN_SCHEMA_VERSION  # type: ignore[union-attr]


def _one_line(err: BaseException) -> str:
    line = str(err)
    assert "\n" not in line
    return line


def test_an_old_run_that_does_not_decode_names_its_version_in_one_line(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    with (run / rundir.STEPS_FILE).open("a") as fh:
        fh.write('{"index": 9, "phase": "timed", "wall_ms": "12 ms"}\n')
    with pytest.raises(errors.CorruptArtifact) as caught:
        load_run(run)
    line = _one_line(caught.value)
    assert caught.value.exit_code == errors.EXIT_BAD_RUN_DIR == 68
    assert f"{run / rundir.STEPS_FILE}" in line and "$.wall_ms" in line
    assert "no schema version (before 2)" in line
    assert f"this perfdoctor reads schema version {run_schema.RUN_SCHEMA_VERSION}" in line


@pytest.mark.parametrize(
    ("name", "content"),
    [
        (rundir.OBSERVATIONS_FILE, '{"dataloaders": [{"num_workers": "two"}]}'),
        (rundir.SAMPLES_FILE, '{"kind": "gpu", "t": 1.0, "index": "0"}\n'),
        (rundir.PROGRESS_FILE, '{"step": "one", "phase": "timed", "t": 1.0}\n'),
        (rundir.SPEC_FILE, '{"label": "baseline", "target": {"kind": "notebook", "name": "x"}}'),
    ],
)
def test_a_newer_run_that_does_not_decode_names_its_version(
    tmp_path: Path, name: str, content: str
) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    rewrite_json(run / rundir.MANIFEST_FILE, schema_version=3)
    (run / name).write_text(content)
    with pytest.raises(errors.CorruptArtifact) as caught:
        load_run(run)
    line = _one_line(caught.value)
    assert f"{run / name}" in line
    assert "written with schema version 3; this perfdoctor reads schema version 2" in line


def test_a_torn_last_line_and_an_unknown_sample_kind_still_load(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    steps = len(load_run(run).steps)
    with (run / rundir.STEPS_FILE).open("a") as fh:
        fh.write('{"index": 99, "phase": "ti')
    before = load_run(run).samples
    with (run / rundir.SAMPLES_FILE).open("a") as fh:
        fh.write('{"kind": "tpu", "t": 3.0, "util": 0.5}\n')
    record = load_run(run)
    assert len(record.steps) == steps
    assert record.samples == before  # the unknown kind is skipped, as its readers did


def test_a_manifest_that_does_not_decode_names_the_version_it_declares(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    rewrite_json(run / rundir.MANIFEST_FILE, schema_version=3, exit_code="none")
    with pytest.raises(errors.CorruptArtifact) as caught:
        load_run(run)
    line = _one_line(caught.value)
    assert caught.value.exit_code == 68
    assert f"{run / rundir.MANIFEST_FILE}" in line and "$.exit_code" in line
    assert "written with schema version 3; this perfdoctor reads schema version 2" in line


def test_spec_and_manifest_decode_to_the_model_and_ignore_unknown_keys(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, with_trace=False, with_memory=False)
    record = load_run(run)
    rewrite_json(run / rundir.SPEC_FILE, added_later=1)
    rewrite_json(run / rundir.MANIFEST_FILE, added_later={"x": 1})
    again = load_run(run)
    assert again.spec == record.spec and again.manifest == record.manifest
    assert rundir.spec_from_dict(rundir.to_jsonable(record.spec)) == record.spec
    assert rundir.manifest_from_dict(rundir.to_jsonable(record.manifest)) == record.manifest


def test_perfdoctor_report_on_an_undecodable_run_exits_68_with_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS[0], run)
    rewrite_json(run / rundir.OBSERVATIONS_FILE, optimizers=[{"class": 7}])
    result = CliRunner().invoke(app, ["report", str(run)])
    assert result.exit_code == errors.EXIT_BAD_RUN_DIR, result.output
    said = [line for line in result.stderr.splitlines() if "schema version" in line]
    assert len(said) == 1 and "no schema version (before 2)" in said[0], result.stderr
