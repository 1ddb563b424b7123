"""`perfdoctor compare`: B judged against A over run directories built by hand.

Each run is a copy of a recorded CPU fixture whose steps.jsonl, spec.json and manifest.json
are rewritten, so the step times, losses, script and machine of each side are known exactly.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor import rundir
from perfdoctor.analyze.record import load_run
from perfdoctor.cli import app
from perfdoctor.errors import BadRunDir
from perfdoctor.model import Evidence, Facts, Finding
from perfdoctor.optimize.compare_runs import (
    MAX_FACT_CHANGES,
    SUMMARY_FACTS,
    RunComparison,
    compare_runs,
    fact_changes,
    finding_changes,
    side_run_dirs,
)
from perfdoctor.optimize.numerics import describe_tolerance
from perfdoctor.optimize.run_samples import run_sample_from_record
from perfdoctor.optimize.verdicts import compare_variant
from perfdoctor.render.compare import render_comparison
from perfdoctor.render.summary import variant_reason
from perfdoctor.render.terminal import make_console

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
TUNED = FIXTURES / "tuned_mlp_cpu"
DEBUG = FIXTURES / "tabular_mlp_debug_cpu"

STEADY = (10.0, 10.2, 9.9, 10.1, 10.0)  # five timed steps of about 10 ms
LOSSES = tuple(2.0 - 0.1 * i for i in range(9))  # one per step of the 2+5+2 plan


def make_run(
    dest: Path,
    *,
    timed_ms: Sequence[float] = STEADY,
    losses: Sequence[float] = LOSSES,
    source: Path = TUNED,
    script: str | None = None,
    argv: Sequence[str] | None = None,
    seed: int | None = 0,
    status: str = "completed",
    device_name: str | None = None,
    torch_version: str | None = None,
) -> Path:
    """A child run dir copied from `source` with the given timed step times and losses."""
    shutil.copytree(source, dest)
    rows = [json.loads(line) for line in (dest / rundir.STEPS_FILE).read_text().splitlines()]
    timed = iter(timed_ms)
    for row, loss in zip(rows, losses, strict=True):
        row["loss"] = loss
        if row["phase"] == "timed":
            row["wall_ms"] = next(timed)
    (dest / rundir.STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))

    spec = rundir.read_json(dest / rundir.SPEC_FILE)
    spec["run_dir"] = str(dest)
    spec["seed"] = seed
    if script is not None:
        spec["target"]["name"] = script
    if argv is not None:
        spec["target"]["argv"] = list(argv)
    rundir.write_json(dest / rundir.SPEC_FILE, spec)

    manifest = rundir.read_json(dest / rundir.MANIFEST_FILE)
    manifest["status"] = status
    if status == "script_crashed":
        manifest["exit_code"] = 1
        manifest["error"] = "RuntimeError: boom"
    if device_name is not None:
        manifest["device"]["name"] = device_name
    if torch_version is not None:
        manifest["versions"]["torch"] = torch_version
    rundir.write_json(dest / rundir.MANIFEST_FILE, manifest)
    return dest


def scaled(factor: float) -> tuple[float, ...]:
    return tuple(ms * factor for ms in STEADY)


# --------------------------------------------------------------------------- verdicts


def test_twice_as_fast_same_workload_is_accepted_with_numerics_judged(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5))
    result = compare_runs(a, b)
    assert result.verdict.verdict == "accepted"
    assert result.verdict.reason.startswith("faster: 2.00x")
    assert result.verdict.speedup == pytest.approx(2.0, rel=0.02)
    assert result.numerics_judged
    assert result.loss_delta == pytest.approx(0.0)
    assert "loss within tolerance 1.0e-04 = max(exact category 1.0e-04, 2 x " in (
        result.numerics_note
    )
    assert result.a.step_ms_p50 == pytest.approx(10.0)
    assert result.b.step_ms_p50 == pytest.approx(5.0)
    assert result.differences == ()


def test_slower_run_is_rejected_as_slower(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(1.5))
    result = compare_runs(a, b)
    assert result.verdict.verdict == "rejected"
    assert result.verdict.reason.startswith("slower: 0.67x")


def test_one_run_per_side_gives_exactly_the_ab_verdict(tmp_path: Path) -> None:
    """Without repeats there is no extra spread: the verdict is compare_variant's own."""
    a = make_run(tmp_path / "a", timed_ms=(10.0, 12.0, 9.0, 11.0, 10.5))
    b = make_run(tmp_path / "b", timed_ms=(9.5, 11.0, 9.2, 10.4, 10.0))
    result = compare_runs(a, b)
    direct = compare_variant(
        [run_sample_from_record(load_run(a))], [run_sample_from_record(load_run(b))], ()
    )
    assert result.verdict.verdict == direct.verdict
    assert result.verdict.reason == direct.reason
    assert result.verdict.speedup == pytest.approx(direct.speedup)
    assert result.verdict.speedup_noise == pytest.approx(direct.speedup_noise)
    assert any("step-to-step noise only" in note for note in result.notes)


def _session(root: Path, repeats: Sequence[Sequence[float]]) -> Path:
    """A session dir whose baseline has one run per entry of `repeats`."""
    root.mkdir()
    for k, timed in enumerate(repeats, start=1):
        make_run(rundir.child_dir(root, rundir.BASELINE_LABEL, k), timed_ms=timed)
    return root


def test_b_run_to_run_spread_widens_the_band(tmp_path: Path) -> None:
    """B's two runs disagree (8 ms vs 20 ms): its first run alone looks 1.25x faster, which
    the A/B statistics accept, but B's own spread puts the band across 1."""
    a = make_run(tmp_path / "a")
    b = _session(tmp_path / "b", [scaled(0.8), scaled(2.0)])
    result = compare_runs(a, b)

    sample_a = [run_sample_from_record(load_run(a))]
    samples_b = [run_sample_from_record(load_run(d)) for d in side_run_dirs(b)[1]]
    direct = compare_variant(sample_a, samples_b, ())
    assert direct.verdict == "accepted"

    assert result.b.runs == 2
    assert result.verdict.verdict == "undecided"  # a wide band across 1x: could not tell
    assert result.verdict.reason.startswith("within noise: 1.25x")
    assert result.verdict.speedup_noise > direct.speedup_noise
    assert any("run-to-run spread of A (1 run) and of B (2 runs)" in n for n in result.notes)


def test_diverging_loss_of_the_same_workload_is_rejected_by_the_guard(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5), losses=[x * 1.5 for x in LOSSES])
    result = compare_runs(a, b)
    assert result.verdict.verdict == "rejected"
    assert "loss" in result.verdict.reason
    assert result.numerics_judged
    assert result.loss_delta == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"script": "other/train.py"}, "different scripts"),
        ({"argv": ["--lr", "0.1"]}, "different arguments"),
        ({"seed": 7}, "different seeds"),
        ({"seed": None}, "not seeded"),
    ],
)
def test_loss_is_information_only_for_a_different_workload(
    tmp_path: Path, change: dict, why: str
) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5), losses=[x * 1.5 for x in LOSSES], **change)
    result = compare_runs(a, b)
    assert result.verdict.verdict == "accepted"  # a diverging loss is no input here
    assert not result.numerics_judged
    assert why in result.verdict.reason
    assert "for information" in result.verdict.reason
    assert result.loss_delta == pytest.approx(0.5, rel=0.05)
    assert result.verdict.loss_delta is None


def test_crashed_b_fails_with_its_error(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", status="script_crashed")
    result = compare_runs(a, b)
    assert result.verdict.verdict == "failed"
    assert "RuntimeError: boom" in result.verdict.reason


def test_crashed_a_fails_naming_a(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", status="script_crashed")
    b = make_run(tmp_path / "b")
    result = compare_runs(a, b)
    assert result.verdict.verdict == "failed"
    assert result.verdict.reason.startswith("A has no usable run")


# --------------------------------------------------------------------------- what differs


def test_setup_differences_name_machine_versions_and_arguments(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(
        tmp_path / "b", argv=["--rows", "100"], device_name="Other CPU", torch_version="2.9.0"
    )
    result = compare_runs(a, b)
    by_name = {d.name: d for d in result.differences}
    assert set(by_name) == {"argv", "device", "torch"}
    assert by_name["argv"].a == "" and by_name["argv"].b == "--rows 100"
    assert by_name["device"].b == "cpu: Other CPU"
    assert by_name["torch"].b == "2.9.0"
    assert any("different devices" in note for note in result.notes)


def test_findings_fixed_and_introduced_between_two_recorded_runs() -> None:
    forward = compare_runs(DEBUG, TUNED)
    fixed = {f.rule_id for f in forward.findings_fixed}
    assert fixed == {"anomaly-detection-on", "grad-without-backward"}
    assert forward.findings_introduced == ()
    backward = compare_runs(TUNED, DEBUG)
    assert {f.rule_id for f in backward.findings_introduced} == fixed
    assert backward.findings_fixed == ()
    flipped = {c.name: c for c in forward.fact_changes}
    assert flipped["anomaly_detection_enabled"].a is True
    assert flipped["anomaly_detection_enabled"].b is False


def _finding(rule_id: str, related: tuple[str, ...] = ()) -> Finding:
    return Finding(
        rule_id=rule_id,
        severity="warning",
        title=rule_id,
        explanation="",
        evidence=(Evidence(name="x", value=1),),
        related=related,
    )


def test_a_finding_merged_under_another_headline_is_kept_not_fixed() -> None:
    a = [_finding("host-syncs")]
    b = [_finding("gpu-underutilized", related=("host-syncs",)), _finding("input-bound")]
    fixed, introduced, kept = finding_changes(a, b)
    assert fixed == ()
    assert kept == ("host-syncs",)
    assert [f.rule_id for f in introduced] == ["gpu-underutilized", "input-bound"]


def test_fact_changes_rank_by_size_and_skip_noise() -> None:
    a = Facts(
        values={
            "forward_frac": 0.30,  # -> 0.33: 3 points, below the threshold
            "backward_frac": 0.20,  # -> 0.50: 30 points
            "cpu_op_count_per_step": 400.0,  # -> 100: -75%
            "torch_num_threads": 2,  # -> 2: unchanged
            "optimizer_impl": "foreach",  # -> fused: a change of kind
            "step_ms_p50": 10.0,  # a summary measure: shown in the summary, not here
            "gpu_busy_frac": None,
            "cpu_util_mean_frac": 0.5,
        }
    )
    b = Facts(
        values={
            "forward_frac": 0.33,
            "backward_frac": 0.50,
            "cpu_op_count_per_step": 100.0,
            "torch_num_threads": 2,
            "optimizer_impl": "fused",
            "step_ms_p50": 5.0,
            "gpu_busy_frac": 0.9,
            "cpu_util_mean_frac": None,
        }
    )
    changes, only_a, only_b = fact_changes(a, b)
    assert [c.name for c in changes] == [
        "optimizer_impl",
        "cpu_op_count_per_step",
        "backward_frac",
    ]
    assert changes[1].relative_change == pytest.approx(-0.75)
    assert changes[2].absolute_change == pytest.approx(0.30)
    assert only_a == ("cpu_util_mean_frac",)
    assert only_b == ("gpu_busy_frac",)
    assert not SUMMARY_FACTS & {c.name for c in changes}


def test_fact_changes_are_capped() -> None:
    names = [f"cpu_op_count_per_step_{i}" for i in range(MAX_FACT_CHANGES + 5)]
    changes, _, _ = fact_changes(
        Facts(values=dict.fromkeys(names, 1.0)), Facts(values=dict.fromkeys(names, 3.0))
    )
    assert len(changes) == MAX_FACT_CHANGES


# --------------------------------------------------------------------------- directories


def test_a_session_uses_every_baseline_repeat_and_the_latest_link(tmp_path: Path) -> None:
    session = _session(tmp_path / "s", [STEADY, scaled(1.02)])
    where, dirs = side_run_dirs(session)
    assert where == session.resolve()
    assert dirs == [session / "baseline", session / "baseline" / "repeat-2"]
    (tmp_path / "latest").symlink_to(session, target_is_directory=True)
    assert side_run_dirs(tmp_path / "latest")[1] == [d.resolve() for d in dirs]


def test_a_variant_dir_stands_for_itself_not_for_its_session_baseline(tmp_path: Path) -> None:
    session = _session(tmp_path / "s", [STEADY])
    variant = make_run(session / "dataloader-workers", timed_ms=scaled(0.5))
    result = compare_runs(session, variant)
    assert result.b.run_dirs == (str(variant.resolve()),)
    assert result.verdict.speedup == pytest.approx(2.0, rel=0.02)


def test_not_a_run_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadRunDir, match="not a perfdoctor run directory"):
        compare_runs(tmp_path / "empty", TUNED)


# --------------------------------------------------------------------------- output


def _render(result: RunComparison) -> str:
    out = io.StringIO()
    render_comparison(result, make_console(out))
    return out.getvalue()


def test_terminal_output_fits_100_columns_without_escapes(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", source=DEBUG)
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5), argv=["--tag", "[red]x[/]"])
    text = _render(compare_runs(a, b))
    assert "ACCEPTED" in text
    assert "fixed in B" in text and "anomaly-detection-on" in text
    assert "[red]x[/]" in text  # user text is printed literally, never read as markup
    assert "\x1b[" not in text  # not a TTY: no colour codes
    assert max(len(line) for line in text.splitlines()) <= 100


def test_json_output_is_plain_json_with_the_verdict(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5))
    data = json.loads(json.dumps(rundir.to_jsonable(compare_runs(a, b))))
    assert data["verdict"]["verdict"] == "accepted"
    assert data["a"]["step_ms_p50"] == pytest.approx(10.0)
    assert {"differences", "fact_changes", "findings_fixed", "notes"} <= set(data)


def test_comparing_never_imports_torch() -> None:
    probe = (
        "import sys, io\n"
        "from pathlib import Path\n"
        "from perfdoctor.optimize.compare_runs import compare_runs\n"
        "from perfdoctor.render.compare import render_comparison\n"
        "from perfdoctor.render.terminal import make_console\n"
        f"r = compare_runs(Path({str(DEBUG)!r}), Path({str(TUNED)!r}))\n"
        "render_comparison(r, make_console(io.StringIO()))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml'))\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- trust (issue 13)


def test_unrelated_scripts_are_flagged_and_shown_as_a_warning(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.2), script="other_train.py")
    result = compare_runs(a, b)
    assert result.unrelated is not None and "different scripts" in result.unrelated
    assert "other_train.py" in result.unrelated
    text = _render(result)
    assert "WARNING" in text and "unrelated runs" in text
    # The same script with the same arguments is one workload: no warning.
    same = compare_runs(a, make_run(tmp_path / "c", timed_ms=scaled(0.5)))
    assert same.unrelated is None and "WARNING" not in _render(same)


def test_a_nonfinite_loss_on_b_is_never_accepted_even_for_unrelated_runs(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    losses = list(LOSSES)
    losses[5] = float("nan")
    for name, change in (("b", {"script": "other_train.py"}), ("c", {})):
        b = make_run(tmp_path / name, timed_ms=scaled(0.2), losses=losses, **change)
        result = compare_runs(a, b)
        assert result.verdict.verdict == "rejected", result.verdict.reason
        assert "nan" in result.verdict.reason.lower()


def test_low_confidence_stays_visible_in_the_verdict_and_the_terminal(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5))
    busy = [
        {"t": 0.0, "kind": "cpu", "cpu_percent": [100.0, 100.0], "child_cpu_percent": 10.0},
    ]
    for run in (a, b):
        (run / rundir.SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in busy))
    result = compare_runs(a, b)
    if result.verdict.low_confidence is None:
        pytest.skip("the fixture's samples format gives no busy-machine figure")
    assert "low confidence" in result.verdict.reason
    assert "ACCEPTED?" in _render(result)


def test_comparing_against_a_run_without_timed_steps_exits_non_zero(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", status="script_crashed")
    # In this process: tests/integration/test_compare_cli.py runs the real command.
    proc = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert proc.exit_code == 67, proc.stdout + proc.stderr
    assert "nothing to compare" in proc.stderr + proc.stdout
    assert "FAILED" in proc.stdout


def _mark_applied(run: Path, opt_id: str) -> None:
    manifest = rundir.read_json(run / rundir.MANIFEST_FILE)
    manifest["applied"] = [{"id": opt_id, "applied": True, "verified": True, "detail": "on"}]
    rundir.write_json(run / rundir.MANIFEST_FILE, manifest)


def test_compare_and_profile_judge_the_same_runs_with_one_stated_loss_tolerance(
    tmp_path: Path,
) -> None:
    """A session's amp-bf16 run against its baseline: `profile` accepted it (low-precision
    tolerance), `compare` REJECTED it "(tolerance 1e-04)" (the exact category), and neither
    said which. Both now derive one tolerance, the category of what B applied widened by A's
    run-to-run spread, and state it in the same words."""
    bf16 = tuple(x * (1 + 2e-3) for x in LOSSES)  # bf16-sized drift: above 1e-4, below 1e-2
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", timed_ms=scaled(0.5), losses=bf16)
    _mark_applied(b, "amp-bf16")
    sample_a = run_sample_from_record(load_run(a))
    sample_b = run_sample_from_record(load_run(b))
    profiled = compare_variant([sample_a], [sample_b], ("amp-bf16",))
    compared = compare_runs(a, b)
    assert profiled.verdict == compared.verdict.verdict == "accepted"
    assert profiled.loss_tolerance is not None
    assert compared.verdict.loss_tolerance == profiled.loss_tolerance
    assert profiled.loss_tolerance.category == "low-precision"

    said = describe_tolerance(profiled.loss_tolerance)
    assert said.startswith("tolerance 1.0e-02 = max(low-precision category 1.0e-02, 2 x ")
    assert f"loss within {said}" in compared.numerics_note
    assert f"loss within {said}" in variant_reason(profiled)
    out = io.StringIO()
    render_comparison(compared, make_console(out))
    flat = " ".join(out.getvalue().replace("│", " ").split())
    assert " ".join(f"loss within {said}".split()) in flat

    # A drift beyond the low-precision category is rejected by both, in the same words.
    drifting = tuple(x * (1 + 5e-2) for x in LOSSES)
    c = make_run(tmp_path / "c", timed_ms=scaled(0.5), losses=drifting)
    _mark_applied(c, "amp-bf16")
    rejected = compare_runs(a, c)
    direct = compare_variant([sample_a], [run_sample_from_record(load_run(c))], ("amp-bf16",))
    assert rejected.verdict.verdict == direct.verdict == "rejected"
    assert said in direct.reason and said in rejected.numerics_note
    assert rejected.verdict.reason == direct.reason
