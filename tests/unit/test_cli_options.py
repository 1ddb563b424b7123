"""Command-line checks that need no child process: bad options are refused with exit code 2
and one clear line, `report` reads without writing into what it reads, and every error keeps
its documented exit code (README, "Exit codes")."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor import __version__, errors
from perfdoctor.cli import app
from perfdoctor.cli_options import ProfileArgs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "tuned_mlp_cpu"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def tree(path: Path) -> dict[str, int]:
    return {
        str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_version_alone_prints_the_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"perfdoctor {__version__}"


def test_profile_without_a_script_is_a_usage_error() -> None:
    result = invoke("profile")
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert "no script given" in result.stderr


@pytest.mark.parametrize(
    ("option", "value", "closest"),
    [
        ("--only", "dataloader-worker", "dataloader-workers"),
        ("--skip", "anomaly-off,fused-optimiser", "fused-optimizer"),
    ],
)
def test_unknown_optimization_ids_are_refused_with_the_closest_one(
    option: str, value: str, closest: str
) -> None:
    result = invoke("profile", option, value, "train.py")
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert f"did you mean {closest}?" in result.stderr


def test_known_ids_pass_the_check(tmp_path: Path) -> None:
    # Accepted ids get as far as the target check (the script does not exist: 66).
    result = invoke("profile", "--only", "dataloader-workers", str(tmp_path / "missing.py"))
    assert result.exit_code == errors.EXIT_TARGET_NOT_FOUND, result.output


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_timeout_must_be_a_positive_number_of_seconds(value: str) -> None:
    result = invoke("profile", "--timeout", value, "train.py")
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert "--timeout" in result.output


def test_profile_help_names_the_script_and_shows_no_bool_placeholders() -> None:
    result = invoke("profile", "--help")
    assert result.exit_code == 0
    usage = result.stdout.splitlines()[0]
    assert usage.endswith("profile [OPTIONS] SCRIPT [ARGS]..."), usage
    assert "<bool>" not in result.stdout
    assert "--only IDS" in result.stdout


def test_a_pickle_that_claims_2_62_bytes_is_a_corrupt_artifact(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    # Protocol 4, BINBYTES8 with a length of 2**62, then junk: 20 bytes in all.
    data = b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"x" * 9
    assert len(data) == 20
    (run / "memory_snapshot.pickle").write_bytes(data)
    result = invoke("report", str(run))
    assert result.exit_code == errors.EXIT_BAD_RUN_DIR, result.output
    assert "corrupt memory snapshot" in result.stderr


def test_with_debug_an_internal_error_keeps_its_exit_code(tmp_path: Path, monkeypatch) -> None:
    def broken(_path):
        raise RuntimeError("a bug")

    monkeypatch.setattr("perfdoctor.diagnose.analyze_session", broken)
    shutil.copytree(FIXTURE, tmp_path / "run")
    result = invoke("--debug", "report", str(tmp_path / "run"))
    assert result.exit_code == errors.EXIT_INTERNAL, result.output
    assert "Traceback" in result.stderr and "RuntimeError: a bug" in result.stderr


def test_with_debug_a_user_error_keeps_its_exit_code(tmp_path: Path) -> None:
    result = invoke("--debug", "report", str(tmp_path))
    assert result.exit_code == errors.EXIT_BAD_RUN_DIR, result.output


def test_report_into_a_missing_directory_is_one_clear_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.md"
    result = invoke("report", str(FIXTURE), "-f", "md", "-o", str(target))
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert "does not exist" in result.stderr
    assert "internal error" not in result.output


def test_report_on_a_lone_child_run_writes_nothing_into_it(tmp_path: Path) -> None:
    run = tmp_path / "tuned_mlp_cpu"
    shutil.copytree(FIXTURE, run)
    before = tree(run)
    for _ in range(2):  # the second call failed with 68 once the first had written baseline/
        result = invoke("report", str(run), "-f", "json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["status"] == "completed"
    assert tree(run) == before


def test_report_on_a_lone_run_that_an_earlier_version_wrote_scalars_into(tmp_path: Path) -> None:
    run = tmp_path / "tuned_mlp_cpu"
    shutil.copytree(FIXTURE, run)
    (run / "baseline").mkdir()
    (run / "baseline" / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    result = invoke("report", str(run), "-f", "json")
    assert result.exit_code == 0, result.output


def test_report_on_the_out_directory_takes_its_latest_session(tmp_path: Path) -> None:
    runs = tmp_path / "perfdoctor-runs"
    session = runs / "20260101-000000-tuned_mlp"
    shutil.copytree(FIXTURE, session / "baseline")
    (runs / "latest").symlink_to(session.name, target_is_directory=True)
    result = invoke("report", str(runs), "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_dir"] == str(session.resolve())


def test_the_rules_listing_names_the_module_each_rule_lives_in() -> None:
    result = invoke("rules")
    assert result.exit_code == 0, result.output
    assert "perfdoctor/rules/input_pipeline.py: 3 rules" in result.stdout
    assert "perfdoctor/rules/cpu.py:" in result.stdout


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"steps": 0}, "--steps must be at least 1"),
        ({"repeat": 0}, "--repeat must be at least 1"),
        ({"warmup": -1}, "--warmup and --profile-steps cannot be negative"),
        ({"timeout": float("nan")}, "--timeout must be a number of seconds above 0"),
        ({"node_rank": 1}, "--node-rank and --rdzv-endpoint need --nnodes > 1"),
        ({"nnodes": 2, "apply": False}, "--nnodes > 1 needs --rdzv-endpoint HOST:PORT"),
        ({"nnodes": 2, "rdzv_endpoint": "h:1"}, "--nnodes > 1 profiles the baseline only"),
        ({"only": "no-such-fix"}, "--only: unknown optimization id 'no-such-fix'"),
        ({"seed": 2**70}, "--seed must be in "),
        ({"seed": -(2**63) - 1}, "--seed must be in "),
    ],
)
def test_profile_args_refuse_each_broken_rule_as_a_usage_error(given, words: str) -> None:
    with pytest.raises(errors.UsageError, match="^" + words.replace(".", r"\.")):
        ProfileArgs(args=("train.py",), **given)


def test_profile_args_build_the_pipelines_options(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    given = ProfileArgs(args=("train.py", "--lr", "0.1"), skip="dataloader-workers")
    options = given.to_options(tmp_path)
    assert (options.target.kind, options.target.name) == ("script", "train.py")
    assert options.target.argv == ("--lr", "0.1")
    assert options.skip == ("dataloader-workers",) and options.only is None
    assert options.baseline_runs == 1 and options.nodes is None
    # Absolute, so that a script that calls os.chdir still writes into the right place.
    assert options.runs_root == tmp_path / "perfdoctor-runs"


@pytest.mark.parametrize("seed", [2**64 - 1, -(2**63), 0])
def test_seeds_torch_accepts_are_accepted(seed: int) -> None:
    assert ProfileArgs(args=("train.py",), seed=seed).seed == seed


@pytest.mark.parametrize("port", ["-1", "65536"])
def test_tensorboard_port_out_of_range_is_a_usage_error(port: str) -> None:
    result = invoke("tensorboard", str(FIXTURE), "--port", port)
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert f"--port must be in 0..65535 (0: a free one), not {port}" in result.stderr
    assert "Traceback" not in result.output


def test_report_on_a_missing_path_is_not_found_as_everywhere_else(tmp_path: Path) -> None:
    for command in (["report"], ["tensorboard"], ["compare", str(FIXTURE)]):
        result = invoke(*command, str(tmp_path / "nope"))
        assert result.exit_code == errors.EXIT_TARGET_NOT_FOUND, (command, result.output)
        assert "nope does not exist" in result.stderr


def _profile_into(out: Path, tmp_path: Path, monkeypatch):
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    return invoke("profile", "--out", str(out), "train.py")


def _one_error_line(result, code: int, words: str) -> None:
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if "perfdoctor: error:" in line]
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_out_that_is_a_file_cannot_be_written(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "afile").write_text("")
    result = _profile_into(tmp_path / "afile", tmp_path, monkeypatch)
    _one_error_line(result, errors.EXIT_OUTPUT_UNWRITABLE, "afile is not a directory")
    result = _profile_into(tmp_path / "afile" / "sub", tmp_path, monkeypatch)
    _one_error_line(result, errors.EXIT_OUTPUT_UNWRITABLE, "afile is not a directory")


def test_out_without_write_permission_cannot_be_written(tmp_path: Path, monkeypatch) -> None:
    import os

    (tmp_path / "ro").mkdir()
    # (chmod does not stop root, who runs many CI containers: the check itself is asked.)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: Path(path).name != "ro" and real_access(path, mode)
    )
    result = _profile_into(tmp_path / "ro" / "runs", tmp_path, monkeypatch)
    _one_error_line(result, errors.EXIT_OUTPUT_UNWRITABLE, "permission denied")
    assert not (tmp_path / "ro" / "runs").exists()


def test_no_space_left_during_the_run_cannot_be_written(tmp_path: Path, monkeypatch) -> None:
    import errno
    import os

    def full(_options, _sink):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("perfdoctor.pipeline.profile", full)
    result = _profile_into(tmp_path / "runs", tmp_path, monkeypatch)
    _one_error_line(result, errors.EXIT_OUTPUT_UNWRITABLE, "No space left on device")


def test_debug_of_one_invocation_does_not_carry_into_the_next(tmp_path: Path, monkeypatch) -> None:
    def broken(_path):
        raise RuntimeError("a bug")

    monkeypatch.setattr("perfdoctor.diagnose.analyze_session", broken)
    monkeypatch.delenv("PERFDOCTOR_DEBUG", raising=False)
    shutil.copytree(FIXTURE, tmp_path / "run")
    assert "Traceback" in invoke("--debug", "report", str(tmp_path / "run")).stderr
    plain = invoke("report", str(tmp_path / "run"))
    assert plain.exit_code == errors.EXIT_INTERNAL, plain.output
    assert "Traceback" not in plain.stderr
    assert "run again with --debug" in plain.stderr


def test_the_declared_options_are_the_fields_of_profile_args() -> None:
    """from_params keeps only ProfileArgs' fields: an option declared under another name
    would be parsed and then dropped."""
    import dataclasses
    import inspect

    from perfdoctor.cli_options import profile_options

    declared = set(inspect.signature(profile_options).parameters) - {"ctx"}
    fields = {f.name for f in dataclasses.fields(ProfileArgs)} - {"args", "repeat_given"}
    assert declared == fields


@pytest.mark.parametrize("command", ["profile", "diagnose", "report", "tensorboard"])
def test_options_show_named_placeholders_not_python_types(command: str) -> None:
    """`--nnodes <int>`, `-f <str>`, `-o <path>`: every option value has a name that says
    what to give, as --steps N does."""
    result = invoke(command, "--help")
    assert result.exit_code == 0
    options = result.stdout.split("Options:")[-1] if "Options:" in result.stdout else ""
    for placeholder in ("<int>", "<str>", "<path>", "<float>"):
        assert placeholder not in options, (command, placeholder)


def test_repeat_help_says_no_apply_runs_once_unless_given() -> None:
    assert "1 unless given" in invoke("profile", "--help").stdout


def test_an_unknown_option_before_the_script_is_a_usage_error() -> None:
    """`perfdoctor profile --stepz 3 train.py` said "--stepz: no such file" (exit 66)."""
    result = invoke("profile", "--stepz", "3", "train.py")
    assert result.exit_code == errors.EXIT_USAGE, result.output
    assert "no such option: --stepz" in result.stderr
    assert "no such file" not in result.stderr


def test_report_on_a_diagnose_output_says_what_it_is(tmp_path: Path) -> None:
    """`perfdoctor report perfdoctor-diagnose/<dir>`: the reports are already there."""
    (tmp_path / "report.json").write_text("{}")
    result = invoke("report", str(tmp_path))
    assert result.exit_code == errors.EXIT_BAD_RUN_DIR, result.output
    assert "perfdoctor diagnose" in result.stderr


@pytest.mark.parametrize(
    ("given", "expected"),
    [((), None), (("--plan-batch",), True), (("--no-plan-batch",), False)],
)
def test_plan_batch_is_automatic_unless_asked_for_or_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: tuple[str, ...], expected: bool | None
) -> None:
    # None: apply runs the plan when the diagnosis calls for it (pipeline._plan_batch).
    seen = []

    def fake_profile(options, _sink):  # stops before any run: only the options matter
        seen.append(options.plan_batch)
        raise errors.TargetNotFound("stop here")

    monkeypatch.setattr("perfdoctor.pipeline.profile", fake_profile)
    monkeypatch.chdir(tmp_path)
    result = invoke("profile", *given, "train.py")
    assert result.exit_code == errors.EXIT_TARGET_NOT_FOUND, result.output
    assert seen == [expected]
