"""The CI regression gate (`perfdoctor compare A B --fail-if-slower PCT`) over run
directories built by hand from a recorded CPU fixture: the step times, run counts and peak
memory of each side are known exactly."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfdoctor import rundir
from perfdoctor.analyze.run_stats import RunSample
from perfdoctor.cli import app
from perfdoctor.errors import EXIT_NO_TRAINING, EXIT_REGRESSION, EXIT_UNDECIDED, EXIT_USAGE
from perfdoctor.optimize.compare_runs import compare_runs
from perfdoctor.optimize.regression_gate import (
    SINGLE_RUN_SPREAD_LOG,
    GateLimits,
    check_peak_memory,
    evaluate_gate,
    run_gate,
)
from perfdoctor.render import format as fmt
from perfdoctor.render.compare import render_comparison
from perfdoctor.render.terminal import make_console

sys.path.insert(0, str(Path(__file__).parent))
from test_compare_runs import STEADY, make_run

# Two launches of one script: per-run medians differ by about 2%, steps by about 1-2%.
RUN_1 = STEADY
RUN_2 = (10.2, 10.4, 10.1, 10.3, 10.2)
RUN_3 = (9.9, 10.0, 9.8, 10.1, 10.0)


def scaled(steps: Sequence[float], factor: float) -> tuple[float, ...]:
    return tuple(ms * factor for ms in steps)


def session(root: Path, runs: Sequence[Sequence[float]], peaks: Sequence[int] = ()) -> Path:
    """A session directory as `perfdoctor profile --repeat N --no-apply` leaves it: the
    baseline's runs in baseline/ and baseline/repeat-k/."""
    root.mkdir(parents=True)
    for k, timed in enumerate(runs, start=1):
        run = make_run(rundir.child_dir(root, rundir.BASELINE_LABEL, k), timed_ms=timed)
        if peaks:
            _set_rss(run, peaks[k - 1])
    return root


def _set_rss(run: Path, peak: int, profiled: int | None = None) -> None:
    rows = [json.loads(line) for line in (run / rundir.STEPS_FILE).read_text().splitlines()]
    for row in rows:
        in_window = row["phase"] in ("profiler_warmup", "profiled")
        row["rss_bytes"] = profiled if in_window and profiled is not None else peak
    (run / rundir.STEPS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`perfdoctor compare ARGS` in this process (stdout and stderr apart); the real process
    and its exit codes are tests/integration/test_regression_gate_cli.py's."""
    got = CliRunner().invoke(app, ["compare", *args])
    if got.exception is not None and not isinstance(got.exception, SystemExit):
        raise got.exception
    return subprocess.CompletedProcess(args, got.exit_code, got.stdout, got.stderr)


# --------------------------------------------------------------------------- step time


def test_a_a_sessions_with_repeats_pass_the_gate(tmp_path: Path) -> None:
    a = session(tmp_path / "a", [RUN_1, RUN_2, RUN_3])
    b = session(tmp_path / "b", [RUN_2, RUN_3, RUN_1])
    result = run_gate(a, b, GateLimits(slower_pct=5))
    assert result.passed
    (check,) = result.checks
    assert check.outcome == "pass"
    assert check.runs_a == 3 and check.runs_b == 3
    assert not check.noise_assumed
    assert abs(check.change_pct) < 2.0
    assert check.low_pct < 0 < check.high_pct <= 5


def test_a_planted_30_percent_slowdown_fails_with_exit_70(tmp_path: Path) -> None:
    a = session(tmp_path / "a", [RUN_1, RUN_2, RUN_3])
    b = session(tmp_path / "b", [scaled(r, 1.3) for r in (RUN_1, RUN_2, RUN_3)])
    result = run_gate(a, b, GateLimits(slower_pct=10))
    assert not result.passed
    (check,) = result.checks
    assert check.outcome == "regression"
    assert check.change_pct == pytest.approx(30.0, abs=1.0)
    assert check.low_pct > 10
    assert result.summary == "FAILED: step time regression"

    proc = cli(str(a), str(b), "--fail-if-slower", "10")
    assert proc.returncode == EXIT_REGRESSION == 70, proc.stderr
    assert "Regression gate" in proc.stdout and "regression" in proc.stdout
    # The same slowdown under a looser limit passes.
    assert cli(str(a), str(b), "--fail-if-slower", "50").returncode == 0


def test_a_noisy_pair_cannot_tell_and_is_undecided_with_exit_71_unless_strict(
    tmp_path: Path,
) -> None:
    """B's two runs disagree by 40%: its median is about 10% slower, but its own spread puts
    the band across the 5% limit. That must not pass silently: exit 71 asks for more runs;
    --strict makes it a failure (70)."""
    a = session(tmp_path / "a", [RUN_1, RUN_2])
    b = session(tmp_path / "b", [scaled(RUN_1, 0.9), scaled(RUN_2, 1.35)])
    result = run_gate(a, b, GateLimits(slower_pct=5))
    (check,) = result.checks
    assert check.outcome == "cannot_tell"
    assert check.low_pct < 5 < check.high_pct
    assert not result.passed
    assert result.outcome == "undecided" and result.exit_code == EXIT_UNDECIDED == 71
    assert result.summary.startswith("UNDECIDED: step time cannot tell")
    assert result.hint is not None
    # The command names the script the records ran, not a placeholder.
    assert "perfdoctor profile --no-apply --repeat 4 sample_models/tuned_mlp.py" in result.hint
    assert "(now 2 vs 2)" in result.hint

    strict = run_gate(a, b, GateLimits(slower_pct=5, strict=True))
    assert not strict.passed and strict.exit_code == EXIT_REGRESSION
    assert strict.summary == "FAILED: step time cannot tell (--strict)"

    proc = cli(str(a), str(b), "--fail-if-slower", "5")
    assert proc.returncode == EXIT_UNDECIDED, proc.stderr
    assert "UNDECIDED" in proc.stdout and "--repeat 4" in " ".join(proc.stdout.split())
    proc = cli(str(a), str(b), "--fail-if-slower", "5", "--strict")
    assert proc.returncode == EXIT_REGRESSION, proc.stderr
    gate = json.loads(cli(str(a), str(b), "--json", "--fail-if-slower", "5").stdout)["gate"]
    assert gate["outcome"] == "undecided" and gate["passed"] is False


def test_a_2x_slowdown_of_single_noisy_runs_never_passes_silently() -> None:
    """A user's +80..100% slowdown of two single runs with noisy steps: the band (-10% ..
    +260%) straddled the 10% limit and the gate exited 0 ("cannot tell" passed)."""
    jitter = (0.75, 1.5, 0.9, 1.3, 0.8, 1.55, 1.0, 0.72)
    a = [RunSample(label="a", step_ms=tuple(1000.0 * j for j in jitter))]
    b = [RunSample(label="b", step_ms=tuple(2000.0 * j for j in reversed(jitter)))]
    result = evaluate_gate(a, b, GateLimits(slower_pct=10))
    (check,) = result.checks
    assert check.change_pct is not None and check.change_pct > 50
    assert check.outcome in ("regression", "cannot_tell")
    assert not result.passed and result.exit_code in (EXIT_REGRESSION, EXIT_UNDECIDED)
    # Whole band beyond the limit: a regression, exit 70.
    c = [RunSample(label="c", step_ms=tuple(3000.0 for _ in jitter))]
    steady = [RunSample(label="a", step_ms=tuple(1000.0 for _ in jitter))]
    decided = evaluate_gate(steady, c, GateLimits(slower_pct=10))
    assert decided.checks[0].outcome == "regression" and decided.exit_code == EXIT_REGRESSION


def test_one_run_per_side_assumes_run_to_run_noise(tmp_path: Path) -> None:
    """A single run per side shows only step-to-step noise, which called A/A pairs 0.76x
    "slower" before; the gate adds an assumed launch-to-launch spread per side instead."""
    a = make_run(tmp_path / "a", timed_ms=RUN_1)
    b = make_run(tmp_path / "b", timed_ms=scaled(RUN_1, 1.25))  # an A/A pair 0.80x apart
    (check,) = run_gate(a, b, GateLimits(slower_pct=10)).checks
    assert check.noise_assumed
    assert check.outcome == "cannot_tell"
    assert check.high_pct - check.low_pct > 2 * (2 * SINGLE_RUN_SPREAD_LOG) * 100 * 0.9
    # A slowdown far beyond any launch-to-launch noise is still called with one run.
    c = make_run(tmp_path / "c", timed_ms=scaled(RUN_1, 2.5))
    (check,) = run_gate(a, c, GateLimits(slower_pct=10)).checks
    assert check.outcome == "regression"


def test_a_faster_b_passes(tmp_path: Path) -> None:
    a = session(tmp_path / "a", [RUN_1, RUN_2])
    b = session(tmp_path / "b", [scaled(RUN_1, 0.6), scaled(RUN_2, 0.6)])
    result = run_gate(a, b, GateLimits(slower_pct=0))
    assert result.passed and result.checks[0].outcome == "pass"
    assert result.checks[0].change_pct == pytest.approx(-40.0, abs=1.0)


def test_a_crashed_b_is_unmeasured_and_fails(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", status="script_crashed")
    result = run_gate(a, b, GateLimits(slower_pct=10))
    assert not result.passed
    assert result.checks[0].outcome == "unmeasured"
    assert "B has no run" in result.checks[0].reason


def test_a_b_that_cannot_be_measured_fails_the_gate_with_70(tmp_path: Path) -> None:
    # Documented: `unmeasured` fails the gate (70), not "never trained" (67).
    a = make_run(tmp_path / "a")
    b = make_run(tmp_path / "b", status="script_crashed")
    got = cli(str(a), str(b), "--fail-if-slower", "10")
    assert got.returncode == EXIT_REGRESSION, got.stderr
    assert "nothing to compare: script crashed" in got.stderr
    assert cli(str(a), str(b)).returncode == EXIT_NO_TRAINING  # no gate: as before


@pytest.mark.parametrize("option", ["--fail-if-slower", "--fail-if-more-memory"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_limit_that_is_no_percentage_is_a_usage_error(
    tmp_path: Path, option: str, value: str
) -> None:
    # nan compares false with everything: such a gate would pass whatever B did.
    a = make_run(tmp_path / "a")
    got = cli(str(a), str(a), option, value)
    assert got.returncode == EXIT_USAGE, got.stderr
    assert f"{option} must be a percentage of 0 or more" in got.stderr


# --------------------------------------------------------------------------- memory


def _mem(peak: int | None) -> RunSample:
    return RunSample(label="x", step_ms=(10.0,), peak_memory_bytes=peak)


MB = 1 << 20


@pytest.mark.parametrize(
    ("peaks_a", "peaks_b", "outcome"),
    [
        ((100 * MB, 101 * MB), (100 * MB, 101 * MB), "pass"),
        ((100 * MB, 101 * MB), (140 * MB, 141 * MB), "regression"),
        ((100 * MB, 101 * MB), (100 * MB, 125 * MB), "cannot_tell"),
        ((100 * MB,), (None,), "unmeasured"),
    ],
)
def test_peak_memory_limit(
    peaks_a: Sequence[int], peaks_b: Sequence[int | None], outcome: str
) -> None:
    check = check_peak_memory([_mem(p) for p in peaks_a], [_mem(p) for p in peaks_b], 10)
    assert check.outcome == outcome


def test_memory_gate_from_run_directories_and_json(tmp_path: Path) -> None:
    a = session(tmp_path / "a", [RUN_1, RUN_2], peaks=[200 * MB, 202 * MB])
    b = session(tmp_path / "b", [RUN_1, RUN_2], peaks=[300 * MB, 301 * MB])
    limits = GateLimits(slower_pct=10, more_memory_pct=20)
    result = run_gate(a, b, limits)
    outcomes = {c.metric: c.outcome for c in result.checks}
    assert outcomes == {"step_time": "pass", "peak_memory": "regression"}
    assert not result.passed

    proc = cli(str(a), str(b), "--json", "--fail-if-slower", "10", "--fail-if-more-memory", "20")
    assert proc.returncode == EXIT_REGRESSION, proc.stderr
    gate = json.loads(proc.stdout)["gate"]
    assert gate["passed"] is False
    assert [c["outcome"] for c in gate["checks"]] == ["pass", "regression"]


def test_the_profiler_window_of_a_sides_first_run_is_no_memory_regression(
    tmp_path: Path,
) -> None:
    """Only a side's first run has the profiler window, and its buffers raise that run's
    RSS: A with three runs against B with one must compare the unprofiled steps."""
    a = session(tmp_path / "a", [RUN_1, RUN_2, RUN_3], peaks=[200 * MB] * 3)
    b = session(tmp_path / "b", [RUN_1], peaks=[200 * MB])
    for side in (a, b):
        _set_rss(side / rundir.BASELINE_LABEL, 200 * MB, profiled=400 * MB)
    (check,) = run_gate(a, b, GateLimits(more_memory_pct=10)).checks
    assert check.outcome == "pass"
    assert check.change_pct == pytest.approx(0.0)


def test_pure_gate_without_limits_checks_nothing() -> None:
    result = evaluate_gate([_mem(1)], [_mem(1)], GateLimits())
    assert result.checks == () and result.passed


def test_bad_gate_options_are_usage_errors(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a")
    assert cli(str(a), str(a), "--fail-if-slower", "-5").returncode == 2
    assert cli(str(a), str(a), "--strict").returncode == 2


def test_the_gate_and_the_verdict_show_one_step_time_estimate(tmp_path: Path) -> None:
    """compare's Verdict and the gate read the same paired estimate: the gate prints it as the
    Verdict's speedup and as B's step time change, in one direction, and the Verdict says which
    statistic it is, apart from the pooled medians of the table; a band across 1x reads
    "cannot tell", and the JSON says "undecided", never "rejected"."""
    a = session(tmp_path / "a", [RUN_1, RUN_2])
    b = session(tmp_path / "b", [scaled(RUN_1, 0.9), scaled(RUN_2, 1.35)])
    (check,) = run_gate(a, b, GateLimits(slower_pct=5)).checks
    verdict = compare_runs(a, b).verdict
    assert verdict.verdict == "undecided" and verdict.speedup is not None
    step_change = f"{(1 / verdict.speedup - 1) * 100:+.1f}%"
    assert check.reason.startswith(f"{verdict.speedup:.2f}x = {step_change} step time (band ")

    out = io.StringIO()
    render_comparison(compare_runs(a, b), make_console(out))
    text = " ".join(out.getvalue().replace("│", " ").split())
    assert f"Speedup {verdict.speedup:.2f}x ± " in text
    # The two step times the speedup is the ratio of, in the Verdict and in the table.
    assert verdict.baseline_step_ms_p50 is not None and verdict.step_ms_p50 is not None
    assert verdict.speedup == verdict.baseline_step_ms_p50 / verdict.step_ms_p50
    pair = f"{fmt.number(verdict.baseline_step_ms_p50)}→{fmt.ms(verdict.step_ms_p50)}"
    assert f": {pair} (paired medians) = {step_change} step time" in text
    assert (
        f"step time, paired medians {fmt.ms(verdict.baseline_step_ms_p50)} "
        f"{fmt.ms(verdict.step_ms_p50)} {step_change}"
    ) in text
    assert "step time p50" not in text  # no second, pooled p50 beside the paired one
    assert f"= {step_change} step time · geometric mean of the paired run ratios" in text
    assert "p90, pooled: over all steps of all of a side's runs" in text
    assert "CANNOT TELL" in text and "REJECTED" not in text


def test_an_a_a_of_noisy_repeats_passes_a_10_percent_gate(tmp_path: Path) -> None:
    """Issue 32: two baseline records of one script, 4 runs each, whose run medians scatter
    by +-4% (a loaded machine) and whose steps scatter within each run. Each run is one
    observation of the run-level band (a pooled Student t interval), so the A/A passes a 10% limit;
    the sum of the bootstrap and both sides' half-ranges had straddled it (exit 71)."""
    factors_a = (1.00, 1.04, 0.96, 1.02)
    factors_b = (0.97, 1.03, 1.01, 0.99)
    noisy = (10.0, 11.5, 9.4, 10.8, 9.9, 12.0, 9.6, 10.3)
    a = session(tmp_path / "a", [scaled(noisy, f) for f in factors_a])
    b = session(tmp_path / "b", [scaled(noisy, f) for f in factors_b])
    result = run_gate(a, b, GateLimits(slower_pct=10))
    assert result.outcome == "passed", result.checks[0].reason
    (check,) = result.checks
    assert check.low_pct is not None and check.high_pct is not None
    assert check.low_pct < 0 < check.high_pct <= 10
    # A real 30% slowdown with the same scatter still fails.
    slow = session(tmp_path / "slow", [scaled(noisy, 1.3 * f) for f in factors_b])
    assert run_gate(a, slow, GateLimits(slower_pct=10)).outcome == "failed"


def test_an_undecided_gate_measures_more_runs_of_b_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: the gate cannot tell (B's two runs disagree by 20%), so it records more runs
    of B as B was recorded (gate_more.py; here the runs are made by hand), a pair at a time,
    and judges again with them: the A/A passes instead of exiting 71."""
    from perfdoctor import gate_more
    from perfdoctor.analyze.record import load_run

    a = session(tmp_path / "a", [scaled(RUN_1, f) for f in (1.0, 1.03, 0.98)])
    b = session(tmp_path / "b", [scaled(RUN_1, 0.9), scaled(RUN_1, 1.1)])
    assert run_gate(a, b, GateLimits(slower_pct=10)).outcome == "undecided"
    steady = iter([1.01, 0.99, 1.0, 1.02, 0.98, 1.0])
    made: list[int] = []

    def record_more(spec, side_dir, count, start, **_: object):  # type: ignore[no-untyped-def]
        runs = []
        for k in range(start, start + count):
            run = make_run(tmp_path / "more" / f"run-{k}", timed_ms=scaled(RUN_1, next(steady)))
            runs.append(load_run(run))
            made.append(k)
        return runs

    monkeypatch.setattr(gate_more, "rerunnable", lambda record: record.spec)
    monkeypatch.setattr(gate_more, "record_more", record_more)
    got = cli(str(a), str(b), "--fail-if-slower", "10", "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    assert made and len(made) <= gate_more.MAX_MORE_RUNS and len(made) % 2 == 0
    assert "more run(s) of B" in got.stderr
    gate = json.loads(got.stdout)["gate"]
    assert gate["outcome"] == "passed"
    # Without it, the same gate stays undecided (exit 71).
    still = cli(str(a), str(b), "--fail-if-slower", "10", "--no-measure-more")
    assert still.returncode == EXIT_UNDECIDED


def test_a_one_run_a_is_narrowed_by_the_runs_of_b_the_gate_measures() -> None:
    """A real A/A of two plain `profile --no-apply` records (makemore, load 19-34): A one run,
    B one run plus the gate's six of its own. With A's launch noise assumed at +-15% the band
    could never pass a 10% limit (it stayed -42% .. +104% after all six); one pooled
    variance gives A the scatter B's runs measured, so the band narrows with them."""
    steps = (10.0, 10.4, 9.8, 10.2, 10.1, 9.9, 10.3, 10.0)

    def runs(label: str, factors: Sequence[float]) -> list[RunSample]:
        return [RunSample(label=label, step_ms=scaled(steps, f)) for f in factors]

    a = runs("a", (1.0,))
    b = runs("b", (1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0))
    (check,) = evaluate_gate(a, b[:1], GateLimits(slower_pct=10)).checks
    assert check.outcome == "cannot_tell" and check.noise_assumed  # 1 vs 1: assumed
    widths = []
    for n in (3, 5, 7):
        (check,) = evaluate_gate(a, b[:n], GateLimits(slower_pct=10)).checks
        assert not check.noise_assumed and (check.runs_a, check.runs_b) == (1, n)
        assert check.low_pct is not None and check.high_pct is not None
        widths.append(check.high_pct - check.low_pct)
    assert widths[0] > widths[1] > widths[2]
    assert check.outcome == "pass" and check.high_pct <= 10
    # A real 30% slowdown, measured the same way, still fails.
    slow = runs("b", (1.32, 1.28, 1.31, 1.29, 1.33, 1.27, 1.3))
    assert evaluate_gate(a, slow, GateLimits(slower_pct=10)).outcome == "failed"
