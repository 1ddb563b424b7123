"""`perfdoctor profile`: record(baseline) -> diagnose -> record(variants) -> compare -> report.

The live loop. It owns the order of the child runs (baseline first, then candidates and
baseline repeats alternating so drift on a noisy machine cancels) and writes session.json as
it goes, so an interrupted session still says what ran. Analysis is delegated to
`perfdoctor.diagnose`, which works from the directory alone.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfdoctor import diagnose, rerun_outputs
from perfdoctor.collect.torchrun import Nodes
from perfdoctor.errors import (
    NoTrainingSteps,
    ProfileStopped,
    RunTimeout,
    TargetNotFound,
    interrupt_exit_code,
    interrupt_name,
)
from perfdoctor.model import (
    ABDesign,
    Arm,
    Comparison,
    Report,
    RunManifest,
    RunSpec,
    StepPlan,
    Target,
    VariantResult,
)
from perfdoctor.optimize.catalog import CATALOG
from perfdoctor.optimize.engine import (
    PAIRED_MEDIANS,
    StatisticChoice,
    block_steps_to_fit,
    choose_statistic,
    long_blocks,
)
from perfdoctor.optimize.inprocess import ROUND_OVERRUN_FACTOR, SCRIPT_ENDED, load_ab_log, pool
from perfdoctor.optimize.inprocess_verdict import METHOD as IN_PROCESS
from perfdoctor.optimize.sizing import Sizing, sizing_env
from perfdoctor.optimize.switchable import SWITCHABLE, needs_warmup_block
from perfdoctor.report_signals import deferred_stop_signals
from perfdoctor.rundir import (
    BASELINE_LABEL,
    LATEST_LINK,
    child_dir,
    session_dir_name,
    update_latest_link,
)
from perfdoctor.session import Session, VariantPlan, save_session

log = logging.getLogger(__name__)

STACKED_LABEL = "stacked"
# The in-process A/B child runs: the single fixes, then the stack and its peels.
AB_LABEL = "ab"
AB_STACK_LABEL = "ab-stack"
# An A/B run takes about this multiple of its measurement budget at most: the arms' first
# blocks and the settling steps are not counted in the budget.
AB_OVERHEAD = 1.3
# An in-process chain (optimize/engine.py): a script that ends before its comparisons decide
# is started again, at most this many processes in all, within this multiple of the
# measurement budget in wall time (each start re-imports torch and re-runs the warm-up).
MAX_AB_PROCESSES = 8
AB_CHAIN_WALL_FACTOR = 3.0
# Rounds a continuation run's blocks are sized to fit in the script's steps.
CONTINUATION_ROUNDS = 6
# Time the re-run rounds past the first look may take, as a multiple of what the rounds up to
# it took (--round-budget overrides it): an undecided variant can at most triple its A/B.
DEFAULT_BUDGET_FACTOR = 2.0
# Statuses after which the script's numbers cannot be trusted for A/B runs.
FAILED_STATUSES = ("script_exited", "script_crashed", "timeout", "launch_failed", "interrupted")


@dataclass(frozen=True)
class ProfileOptions:
    target: Target
    cwd: Path
    runs_root: Path
    plan: StepPlan = field(default_factory=StepPlan)
    seed: int | None = 0
    apply: bool = True
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    repeat: int = 2
    timeout_s: float | None = None
    nvtx: bool = False
    echo_output: bool = True
    nproc_per_node: int = 1  # > 1: every child run is torchrun with N ranks (collect/torchrun.py)
    nodes: Nodes | None = None  # several nodes: this one's place (collect/torchrun.py)
    # Baseline runs of a --no-apply session (`--repeat N --no-apply`): repeats 2..N only time
    # the steps, so `perfdoctor compare` can measure run-to-run noise on each side.
    baseline_runs: int = 1
    # --run-to-end: every run lets the script finish (only the plan's steps are measured).
    run_to_end: bool = False
    # Re-run rounds (optimize/engine.py's looks for whole runs, from `repeat` rounds and at
    # least 3): at most `max_rounds` rounds in all, and the rounds past the first look take
    # at most `round_budget_s` seconds (None: twice what the rounds up to it took).
    max_rounds: int = 6
    round_budget_s: float | None = None
    # In-process A/B (optimize/inprocess.py): fixes that can be switched between steps are
    # measured in one child run against the baseline, for at most `ab_budget_s` seconds of
    # measurement; False measures every fix by re-runs.
    in_process: bool = True
    ab_budget_s: float = 60.0
    # --plan-batch (batch_plan.py): peak memory and samples/s per batch size, after the rest.
    # None: apply runs it on its own when a finding is about memory or a larger batch
    # (batch_plan.auto_reason), within a budget; False (--no-plan-batch): never.
    plan_batch: bool | None = None
    memory_limit_bytes: int | None = None  # --memory-limit: the peak the plan may reach
    want_batch: int | None = None  # --want-batch: the batch the user wants to fit
    keep_effective_batch: bool = False  # --keep-effective-batch


@dataclass(frozen=True)
class RunAnnouncement:
    """Sent to the progress display when a child run starts."""

    label: str
    repeat: int
    number: int  # 1-based position among the runs planned so far
    planned_runs: int
    planned_steps: int
    profiled: bool
    # A re-run round past the first look (optimize/engine.py): its number and the most
    # rounds allowed.
    # The total of runs grows with each such round, so the display names the round instead.
    extra_round: int | None = None
    max_rounds: int | None = None
    # --run-to-end: the script goes on past the planned steps, which are all that is counted.
    run_to_end: bool = False
    # An in-process A/B run: its steps are not planned ahead; it measures for at most this
    # many seconds, and its arms.
    ab_budget_s: float | None = None
    ab_arms: tuple[str, ...] = ()
    # The session's expected time left, from this run's start (None: not estimated yet).
    session_left_s: float | None = None


@dataclass(frozen=True)
class ProfileOutcome:
    session_dir: Path
    report: Report
    exit_code: int
    # How the baseline ended when the script failed: for the terminal's last line, which says
    # that the exit code is the script's own and not one of perfdoctor's.
    script_status: str | None = None
    script_error: str | None = None


class ProgressSink:
    """What the pipeline tells the display. The default shows nothing."""

    def run_started(self, run: RunAnnouncement) -> None:
        """A child run starts."""

    def step(self, progress: object) -> None:
        """The child finished a step (a launcher.Progress)."""

    def run_finished(self, run: RunAnnouncement, manifest: RunManifest) -> None:
        """A child run ended, one way or another."""

    def note(self, message: str) -> None:
        """A one-line message about what the pipeline decided."""


def profile(options: ProfileOptions, sink: ProgressSink | None = None) -> ProfileOutcome:
    from perfdoctor.collect.target import validate_target

    sink = sink or ProgressSink()
    validate_target(options.target, options.cwd)

    options.runs_root.mkdir(parents=True, exist_ok=True)
    session_dir = _new_session_dir(options.runs_root, _session_name(options.target))
    previous_latest = _latest_target(options.runs_root)
    update_latest_link(options.runs_root, session_dir)
    session = Session(
        target=options.target,
        cwd=str(options.cwd),
        plan=options.plan,
        seed=options.seed,
        repeat=max(1, options.repeat),
        apply=options.apply,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        options={
            "only": list(options.only) if options.only is not None else None,
            "skip": list(options.skip),
            "timeout_s": options.timeout_s,
            "nvtx": options.nvtx,
            "run_to_end": options.run_to_end,
            "max_rounds": options.max_rounds,
            "round_budget_s": options.round_budget_s,
            # Only when asked for: a single-process session.json stays as it was.
            **({"nproc_per_node": options.nproc_per_node} if options.nproc_per_node > 1 else {}),
            **({"nodes": dataclasses.asdict(options.nodes)} if options.nodes else {}),
        },
        git=_script_git(options.target, options.cwd),
    )
    runner = _Runner(options, session_dir, session, sink)
    try:
        return _run_session(runner, previous_latest)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM / SIGHUP (errors.Stopped)
        raise _stopped(runner, err) from None


def _run_session(runner: _Runner, previous_latest: str | None) -> ProfileOutcome:
    options, session_dir, sink = runner.options, runner.session_dir, runner.sink
    timing_runs = max(1, options.baseline_runs) if not options.apply else 1
    baseline = runner.run(BASELINE_LABEL, (), repeat=1, planned_runs=timing_runs)
    if baseline.status == "launch_failed" and baseline.exit_code == 66:
        # Nothing ran: leave no empty session behind, and `latest` where it was.
        _discard_session(options.runs_root, session_dir, previous_latest)
        raise TargetNotFound(baseline.error or f"module not found: {options.target.name}")
    if baseline.status not in FAILED_STATUSES and baseline.steps_seen > 0:
        runner.run_baseline_repeats(timing_runs)

    if baseline.status in FAILED_STATUSES or not options.apply or baseline.steps_seen == 0:
        _plan_batch(runner, baseline)
        return _finish(runner, baseline)

    diagnosis = diagnose.diagnose_session(session_dir)
    candidates = diagnose.auto_candidates(diagnosis, only=options.only, skip=options.skip)
    if not candidates:
        sink.note("no optimization to try automatically for this run")
        _plan_batch(runner, baseline, diagnosis)
        return _finish(runner, baseline)

    # The baseline's report first: stopping during the variants (which take most of the
    # time) must not cost the diagnosis that is already done. Rewritten at the end.
    _write_session_reports(session_dir)
    sink.note("trying: " + ", ".join(candidates))
    runner.sizings = _sizings(diagnosis, candidates, sink)
    manifest = diagnosis.record.manifest
    runner.baseline_on_cuda = bool(
        manifest is not None and manifest.device is not None and manifest.device.kind == "cuda"
    )
    switched = in_process_candidates(candidates, options, diagnosis)
    if getattr(runner.sizings.get("dataloader-workers"), "fewer", False):
        # Fewer workers than the script's own: the applier lowers the count where the loader
        # is built, so there is no twin to switch to; measured by re-runs.
        switched = [c for c in switched if c != "dataloader-workers"]
    rerun = [c for c in candidates if c not in switched]
    runner.statistics = _statistics(diagnosis, switched, rerun)
    step_ms = _baseline_step_ms(diagnosis)
    runner.baseline_step_s = statistics.median(step_ms) / 1000.0 if step_ms else None
    for where, ids, choice in zip(
        ("in one process", "by re-runs"), (switched, rerun), runner.statistics, strict=True
    ):
        if ids:
            sink.note(f"statistic {where}: {choice.name} ({choice.why})")
    coupled = coupled_variant(runner.sizings, candidates)
    # In one process the coupled variant takes the place of the workers alone: the sizing
    # found that the workers beside the script's threads outnumber the cores, and on the
    # README demo (2 cores) a third arm for the contended workers alone cost a third more
    # per pair and ~40 s before the coupled one decided (benchmarks/README.md). By re-runs
    # (fewer workers than the script's) both are measured, as before.
    singles, coupled_in_one = in_process_singles(switched, coupled)
    in_one = [*singles, *([coupled.label] if coupled and coupled_in_one else [])]
    runner.plan_eta(in_one, [*rerun, *([coupled.label] if coupled and not coupled_in_one else [])])
    if switched:
        sink.note(
            "measured in one process, switched between steps: "
            + ", ".join(in_one)
            + (f"; by re-runs: {', '.join(rerun)}" if rerun else "")
        )
        if coupled is not None and coupled_in_one:
            sink.note(_COUPLED_IN_ONE_NOTE.format(label=coupled.label))
        runner.run_in_process(
            singles, coupled=coupled.optimizations if coupled and coupled_in_one else ()
        )
    if rerun:
        by_runs = runner.statistics[1]
        plans = [
            VariantPlan(
                label=c,
                optimizations=(c,),
                statistic=by_runs.name,
                statistic_why=by_runs.why,
            )
            for c in rerun
        ]
        if coupled is not None and not coupled_in_one and "dataloader-workers" in rerun:
            sink.note(_COUPLED_NOTE.format(label=coupled.label))
            plans.append(replace(coupled, statistic=by_runs.name, statistic_why=by_runs.why))
        runner.run_ab_rounds(plans)

    accepted = diagnose.accepted_optimizations(runner.session_dir)
    # A variant of several fixes measured already (the coupled one) is that stack.
    measured = {frozenset(v.optimizations) for v in runner.session.variants}
    if len(accepted) >= 2 and frozenset(accepted) not in measured:
        if all(a in switched for a in accepted):
            sink.note(
                "stacking the accepted ones, and peeling each off the stack: " + ", ".join(accepted)
            )
            runner.run_in_process(accepted, stack=True)
        else:
            sink.note("stacking the accepted ones: " + ", ".join(accepted))
            runner.run_ab_rounds(
                [VariantPlan(label=STACKED_LABEL, optimizations=tuple(accepted), stacked=True)],
                baseline_first=True,
            )
    _plan_batch(runner, baseline, diagnosis)
    return _finish(runner, baseline)


def _plan_batch(
    runner: _Runner, baseline: RunManifest, diagnosis: diagnose.Diagnosis | None = None
) -> None:
    """--plan-batch after everything else (its runs come after the A/B rounds, so they pair
    with nothing). Without it, an applying session runs the plan on its own when the
    diagnosis is about memory or a larger batch (batch_plan.auto_reason), within a budget of
    the time the apply took (batch_plan.AUTO_BUDGET_FACTOR); --no-plan-batch turns that off,
    and any other finding the plan addresses is only pointed at it."""
    from perfdoctor import batch_plan

    options = runner.options
    if baseline.status in FAILED_STATUSES or baseline.steps_seen == 0:
        return
    trigger, budget_s = "--plan-batch", None
    if not options.plan_batch:
        reason = batch_plan.auto_reason(diagnosis.findings) if diagnosis is not None else None
        if options.plan_batch is False or diagnosis is None or reason is None:
            if diagnosis is not None:
                batch_plan.offer(diagnosis, runner.sink)
            return
        trigger = f"apply: {reason}"
        budget_s = max(
            batch_plan.AUTO_MIN_BUDGET_S,
            batch_plan.AUTO_BUDGET_FACTOR * (time.monotonic() - runner.created),
        )
        runner.sink.note(
            f"batch plan: {reason}; measuring batch sizes within {budget_s:.0f}s "
            "(--no-plan-batch skips it)"
        )
    diagnosis = diagnosis or diagnose.diagnose_session(runner.session_dir)
    batch_plan.plan_batch(
        runner,
        runner.sink,
        diagnosis,
        target=options.target,
        cwd=options.cwd,
        rounds=options.repeat,
        memory_limit=options.memory_limit_bytes,
        want_batch=options.want_batch,
        keep_effective=options.keep_effective_batch,
        trigger=trigger,
        budget_s=budget_s,
    )


# DataLoader fixes change how batches arrive: the steps with them are bursty whatever the
# baseline's are (engine.choose_statistic's `prefetching`).
_PREFETCHING = frozenset({"dataloader-workers", "pin-memory"})


def _baseline_step_ms(diagnosis: diagnose.Diagnosis) -> list[float]:
    from perfdoctor.analyze.run_stats import timed_steps

    return [s.wall_ms for s in timed_steps(diagnosis.record.steps) if s.wall_ms is not None]


def _statistics(
    diagnosis: diagnose.Diagnosis, switched: Sequence[str], rerun: Sequence[str]
) -> tuple[StatisticChoice, StatisticChoice]:
    """The engine's statistic for the in-process comparisons and for the re-run ones, from
    the baseline's timed steps (optimize/engine.py)."""
    step_ms = _baseline_step_ms(diagnosis)
    return (
        choose_statistic(step_ms, prefetching=bool(_PREFETCHING.intersection(switched))),
        choose_statistic(step_ms, prefetching=bool(_PREFETCHING.intersection(rerun))),
    )


_COUPLED_IN_ONE_NOTE = (
    "{label}: the workers measured with the threads the cores leave beside them, in place "
    "of the workers alone, which the sizing expects to contend with the script's threads"
)
_COUPLED_NOTE = (
    "{label}: the workers with the threads the CPU budget leaves, its own variant, so each "
    "change is credited with its own effect"
)


def coupled_variant(sizings: dict[str, Sizing], candidates: Sequence[str]) -> VariantPlan | None:
    """DataLoader workers beside the script's threads can outnumber the cores; the fix is
    then workers and fewer threads together (sizing.py: measured 8.6x against 1.06x for the
    workers alone on 2 busy cores). One variant changes one thing, so the pair is a variant
    of its own beside the workers alone (and cpu-threads alone when it is a candidate): the
    report shows what the workers buy and what the coupled thread change adds."""
    sizing = sizings.get("dataloader-workers")
    if "dataloader-workers" not in candidates or getattr(sizing, "coupled_threads", None) is None:
        return None
    ids = ("dataloader-workers", "cpu-threads")
    return VariantPlan(label="+".join(ids), optimizations=ids)


def in_process_singles(
    switched: Sequence[str], coupled: VariantPlan | None
) -> tuple[list[str], bool]:
    """The fixes measured alone in one process, and whether the coupled variant is an arm
    there too (in place of dataloader-workers alone, whose twin is what it switches)."""
    coupled_in_one = coupled is not None and "dataloader-workers" in switched
    singles = [c for c in switched if not (coupled_in_one and c == "dataloader-workers")]
    return singles, coupled_in_one


def in_process_candidates(
    candidates: Sequence[str], options: ProfileOptions, diagnosis: diagnose.Diagnosis
) -> list[str]:
    """The candidates measured in one process: those whose applier can switch between
    steps, in a session of one training process (the arms of several ranks would have to
    switch and stop together; those, and launcher commands, are measured by re-runs)."""
    if not options.in_process or options.nproc_per_node > 1 or options.nodes is not None:
        return []
    record = diagnosis.record
    if options.target.kind == "command" or record.ranks_launched > 1 or record.ranks:
        return []
    return [c for c in candidates if c in SWITCHABLE]


def _finish(runner: _Runner, baseline: RunManifest) -> ProfileOutcome:
    # A stop that lands here waits for the report, then ends the session (report_signals).
    with deferred_stop_signals():
        analyzed = diagnose.analyze_session(runner.session_dir)
        report = diagnose.write_reports(runner.session_dir, analyzed).report
        runner.reported = True
        _record_history(runner)
    if baseline.status == "timeout":
        raise RunTimeout(
            f"the script ran past --timeout {runner.options.timeout_s:g}s and was stopped; "
            f"partial report in {runner.session_dir}"
        )
    if baseline.status not in FAILED_STATUSES and baseline.steps_seen == 0:
        raise NoTrainingSteps(
            "the script never trained: no optimizer step, backward or model forward was seen "
            f"(report in {runner.session_dir})"
        )
    if baseline.status in FAILED_STATUSES:
        return ProfileOutcome(
            runner.session_dir,
            report,
            baseline.exit_code,
            script_status=baseline.status,
            script_error=baseline.error,
        )
    return ProfileOutcome(runner.session_dir, report, 0)


def _write_session_reports(session_dir: Path) -> Report:
    with deferred_stop_signals():
        return diagnose.write_reports(session_dir, diagnose.analyze_session(session_dir)).report


def _stopped(runner: _Runner, err: KeyboardInterrupt) -> ProfileStopped:
    """Record in session.json that perfdoctor was stopped, and write the partial report.

    The child's process tree is already stopped and its manifest written (the launcher's
    `except KeyboardInterrupt`); a second Ctrl-C while the report is written still ends it.
    """
    by, code = interrupt_name(err), interrupt_exit_code(err)
    if runner.reported:  # the stop was held until the final report was written
        return ProfileStopped(
            f"stopped by {by} once the report was written: {runner.session_dir}", exit_code=code
        )
    during = runner.current_run
    runner.session = replace(
        runner.session, interrupted={"by": by, "exit_code": code, "during": during}
    )
    save_session(runner.session_dir, runner.session)
    where = f" during {during}" if during else ""
    try:
        _write_session_reports(runner.session_dir)
    except Exception as report_err:  # the artifacts are kept whatever happens
        log.warning("the partial report could not be written: %s", report_err)
        return ProfileStopped(
            f"stopped by {by}{where}; the runs' artifacts are kept in {runner.session_dir}",
            exit_code=code,
            hint=f"perfdoctor report {runner.session_dir} rebuilds the report",
        )
    _record_history(runner)
    return ProfileStopped(
        f"stopped by {by}{where}; partial report in {runner.session_dir}",
        exit_code=code,
        hint=f"perfdoctor report {runner.session_dir} re-renders it",
    )


def _script_git(target: Target, cwd: Path) -> dict[str, Any] | None:
    """The commit of the script's repository (of the working directory for a module or a
    launcher command), for `perfdoctor history`."""
    from perfdoctor.history.git_info import git_state

    where = (cwd / target.name).parent if target.kind == "script" else cwd
    return git_state(where)


def _record_history(runner: _Runner) -> None:
    """The session's row in the --out directory's history index. Never fails the session:
    the index is rebuilt from the session directories whenever it is next read."""
    from perfdoctor.history import record_session

    try:
        record_session(runner.options.runs_root, runner.session_dir)
    except Exception as err:
        log.warning("history index not updated: %s", err)


def _latest_target(runs_root: Path) -> str | None:
    link = runs_root / LATEST_LINK
    try:
        return os.readlink(link) if link.is_symlink() else None
    except OSError:
        return None


def _discard_session(runs_root: Path, session_dir: Path, previous_latest: str | None) -> None:
    shutil.rmtree(session_dir, ignore_errors=True)
    link = runs_root / LATEST_LINK
    try:
        if link.is_symlink():
            link.unlink()
        if previous_latest is not None:
            link.symlink_to(previous_latest, target_is_directory=True)
    except OSError:
        pass


def _new_session_dir(runs_root: Path, script_name: str) -> Path:
    name = session_dir_name(script_name)
    candidate = runs_root / name
    suffix = 2
    while candidate.exists():  # two sessions in the same second
        candidate = runs_root / f"{name}-{suffix}"
        suffix += 1
    candidate.mkdir(parents=True)
    return candidate


class _Runner:
    """Launches child runs in order and keeps session.json up to date."""

    def __init__(
        self, options: ProfileOptions, session_dir: Path, session: Session, sink: ProgressSink
    ) -> None:
        self.options = options
        self.session_dir = session_dir
        self.session = session
        self.sink = sink
        self.started = 0
        self.created = time.monotonic()  # the session's start: what apply has taken so far
        self.baseline_repeats = 0
        self.current_run: str | None = None  # the child run in progress, relative to the session
        # Sizings measured from the baseline, by optimization id (the catalog entry's sizing
        # hook), passed to the runs that apply that optimization.
        self.sizings: dict[str, Sizing] = {}
        self.baseline_step_s: float | None = None  # the baseline's median timed step
        # When the session is expected to end (time.monotonic()), once the plan is known.
        self.deadline: float | None = None
        self.run_s: list[float] = []  # wall time of each run so far
        self.baseline_on_cuda = False  # set once the baseline is diagnosed
        # The engine's statistic (in one process, by re-runs), chosen from the baseline.
        self.statistics: tuple[StatisticChoice, StatisticChoice] = (
            StatisticChoice(PAIRED_MEDIANS, ""),
            StatisticChoice(PAIRED_MEDIANS, ""),
        )
        self.reported = False  # the final report is written
        save_session(session_dir, session)

    def run(
        self,
        label: str,
        optimizations: Sequence[str],
        *,
        repeat: int,
        planned_runs: int,
        extra_round: tuple[int, int] | None = None,
        ab: ABDesign | None = None,
        target: Target | None = None,
        env: dict[str, str] | None = None,
        profile: bool = True,
    ) -> RunManifest:
        """One child run. `extra_round`: (round, most rounds) when it belongs to an extra
        A/B round, for the progress display; `ab`: an in-process A/B run's design;
        `target`, `env`, `profile`: a --plan-batch run's argv, batch and no profiler
        (batch_plan.py)."""
        from perfdoctor.collect.launcher import launch

        run_dir = child_dir(self.session_dir, label, repeat)
        run_dir.mkdir(parents=True, exist_ok=True)
        # One trace per variant is enough; repeats only time, and an A/B run switches arms.
        profiled = repeat == 1 and ab is None and profile
        plan = self.options.plan if profiled else replace(self.options.plan, profiled_steps=0)
        spec = RunSpec(
            label=label,
            target=target or self.options.target,
            cwd=str(self.options.cwd),
            run_dir=str(run_dir),
            plan=plan,
            seed=self.options.seed,
            optimizations=tuple(optimizations),
            profile=profiled and plan.profiled_steps > 0,
            nvtx=self.options.nvtx,
            env={
                **_env_for(optimizations),
                **sizing_env(optimizations, self.sizings),
                **(env or {}),
            },
            run_to_end=self.options.run_to_end and ab is None,
            ab=ab,
        )
        # The session's first run is the user's own; what later runs add to the script's
        # log folders is perfdoctor's litter, removed after each (rerun_outputs.py).
        rerun = self.started > 0
        before = self._output_snapshot() if rerun else None
        self.started += 1
        announcement = RunAnnouncement(
            label=label,
            repeat=repeat,
            number=self.started,
            planned_runs=max(planned_runs, self.started),
            planned_steps=plan.total_steps,
            profiled=spec.profile,
            extra_round=extra_round[0] if extra_round else None,
            max_rounds=extra_round[1] if extra_round else None,
            run_to_end=spec.run_to_end,
            ab_budget_s=ab.budget_s if ab is not None else None,
            ab_arms=tuple(a.label for a in ab.arms) if ab is not None else (),
            session_left_s=(
                max(0.0, self.deadline - time.monotonic()) if self.deadline is not None else None
            ),
        )
        self.sink.run_started(announcement)
        self.current_run = str(run_dir.relative_to(self.session_dir))
        try:
            manifest = launch(
                spec,
                timeout_s=self.options.timeout_s,
                on_progress=self.sink.step,
                echo_output=self.options.echo_output and label == BASELINE_LABEL,
                nproc_per_node=self.options.nproc_per_node,
                nodes=self.options.nodes,
            )
        finally:  # also when perfdoctor is stopped during the run: its process tree is gone
            if before is not None:
                self._remove_rerun_outputs(before)
        self.current_run = None
        if ab is None:
            self.run_s.append(manifest.wall_s)
        self.sink.run_finished(announcement, manifest)
        self.session = self.session.with_run(label, str(run_dir.relative_to(self.session_dir)))
        if label == BASELINE_LABEL:
            self.baseline_repeats = repeat
        save_session(self.session_dir, self.session)
        return manifest

    def run_baseline_repeats(self, total: int) -> None:
        """Timing-only baseline repeats up to `total` runs; stops at the first failed one."""
        for repeat in range(self.baseline_repeats + 1, total + 1):
            manifest = self.run(BASELINE_LABEL, (), repeat=repeat, planned_runs=total)
            if manifest.status in FAILED_STATUSES:
                return

    def plan_eta(self, switched: Sequence[str], rerun: Sequence[str]) -> None:
        """The session's expected end: an A/B run takes its budget, its arms' first blocks and
        a start-up; each switchable fix a seeded run at most; each fix measured by re-runs
        the rounds up to its first look and the baseline runs between them (rounds past the
        first look not counted)."""
        run_s = statistics.median(self.run_s) if self.run_s else 10.0
        left = 0.0
        if switched:
            left += self.options.ab_budget_s * AB_OVERHEAD + run_s
            left += len(switched) * run_s
        if rerun:
            looks = diagnose.session_looks(self.session)
            rounds = min(looks.first_look, looks.max_pairs)
            left += (len(rerun) * rounds + rounds - 1) * run_s
        self.deadline = time.monotonic() + left
        self.sink.note(
            f"expected time left: up to about {left:.0f}s (rounds past a first look not counted)"
        )

    def run_in_process(
        self, ids: Sequence[str], *, stack: bool = False, coupled: Sequence[str] = ()
    ) -> None:
        """One A/B child run switching the fixes between steps (optimize/inprocess.py), then
        a seeded run of each fix that came out faster, for its numerics and its trace.

        Singles: arms baseline and each fix, each fix against the baseline. `stack`: arms
        baseline, all the fixes, and all but one for each fix; the stack against the
        baseline, and the stack against the stack without each fix (what that fix still
        buys on top of the others). `coupled`: one more arm of several fixes switched
        together (the DataLoader workers with the threads the cores leave them), against
        the baseline like the singles."""
        label = AB_STACK_LABEL if stack else AB_LABEL
        ab_rel = str(child_dir(self.session_dir, label).relative_to(self.session_dir))
        fixes = tuple(ids)
        if stack:
            arms = [Arm(BASELINE_LABEL), Arm(STACKED_LABEL, fixes)]
            comparisons = [Comparison(STACKED_LABEL, 0, 1)]
            variants = [
                VariantPlan(
                    label=STACKED_LABEL,
                    optimizations=fixes,
                    stacked=True,
                    method=IN_PROCESS,
                    ab_run=ab_rel,
                )
            ]
            for fix in fixes:
                rest = tuple(f for f in fixes if f != fix)
                arms.append(Arm(f"{STACKED_LABEL}-without-{fix}", rest))
                peel = f"{fix}-in-stack"
                comparisons.append(Comparison(peel, len(arms) - 1, 1))
                variants.append(
                    VariantPlan(
                        label=peel,
                        optimizations=(fix,),
                        stacked=True,
                        method=IN_PROCESS,
                        ab_run=ab_rel,
                        peel_of=fix,
                    )
                )
        else:
            arms = [Arm(BASELINE_LABEL), *(Arm(f, (f,)) for f in fixes)]
            comparisons = [Comparison(f, 0, k + 1) for k, f in enumerate(fixes)]
            variants = [
                VariantPlan(label=f, optimizations=(f,), method=IN_PROCESS, ab_run=ab_rel)
                for f in fixes
            ]
            if coupled:
                both = tuple(coupled)
                arms.append(Arm("+".join(both), both))
                comparisons.append(Comparison("+".join(both), 0, len(arms) - 1))
                variants.append(
                    VariantPlan(
                        label="+".join(both), optimizations=both, method=IN_PROCESS, ab_run=ab_rel
                    )
                )
                # Every applier an arm switches is installed in the one process.
                fixes = tuple(dict.fromkeys([*fixes, *both]))
        in_one = self.statistics[0]
        design = ABDesign(
            arms=tuple(arms),
            comparisons=tuple(comparisons),
            budget_s=self.options.ab_budget_s,
            seed=self.options.seed if self.options.seed is not None else 0,
            statistic=in_one.name,
            statistic_why=in_one.why,
            settle_steps=self._settle_steps(fixes),
            long_blocks=long_blocks(self.baseline_step_s, in_one.name),
        )
        for variant in variants:
            self.session = self.session.with_variant(self._with_prediction(variant))
        save_session(self.session_dir, self.session)
        planned = self.started + 1 + len(fixes if not stack else (STACKED_LABEL,))
        chain_started = time.monotonic()
        manifest = self.run(label, fixes, repeat=1, planned_runs=planned, ab=design)
        if manifest.status in FAILED_STATUSES and manifest.steps_seen == 0:
            return
        self._continue_in_process(label, design, fixes, manifest, chain_started)
        results = self._verdicts()
        faster = [
            v
            for v in variants
            if v.peel_of is None
            and (r := results.get(v.label)) is not None
            and r.reason.startswith("faster")
        ]
        # A fix that changes the arithmetic (TF32, bf16, a compiler's fusions) is judged
        # against the baseline's own run-to-run spread (numerics.derive_tolerance): that
        # takes a second seeded baseline run, once. Only on a GPU: a seeded CPU run repeats
        # its losses bit for bit (spread 0), so the run would change no tolerance.
        loose = self.baseline_on_cuda and any(
            CATALOG[i].numerics_tolerance != "exact"
            for v in faster
            for i in v.optimizations
            if i in CATALOG
        )
        spread_run = loose and len(self.session.baseline_runs) < 2
        planned = self.started + len(faster) + int(spread_run)
        if spread_run:
            self.run(BASELINE_LABEL, (), repeat=self.baseline_repeats + 1, planned_runs=planned)
        for variant in faster:
            self.run(variant.label, variant.optimizations, repeat=1, planned_runs=planned)

    def _settle_steps(self, fixes: Sequence[str]) -> int:
        """Steps that do not count at a block's start: one (a switch's first cost), and with
        DataLoader workers switched in, their prefetch queue too (prefetch_factor 2 per
        worker): batches the workers prepared during the other arm's block would otherwise
        make the fix's first steps look free."""
        sizing = self.sizings.get("dataloader-workers")
        workers = getattr(sizing, "workers", 0) if "dataloader-workers" in fixes else 0
        return 1 + 2 * max(0, int(workers or 0))

    def _continue_in_process(
        self,
        label: str,
        design: ABDesign,
        fixes: Sequence[str],
        manifest: RunManifest,
        started: float,
    ) -> None:
        """The script ended before some comparisons decided: start it again with those
        comparisons, the earlier runs named in the design so the new pairs pool with theirs
        in the same sequential test (optimize/engine.py), until each decides or the one
        budget of the chain is spent: its measurement time (ab_budget_s), its wall time
        (AB_CHAIN_WALL_FACTOR x that) and MAX_AB_PROCESSES processes."""
        runs = [child_dir(self.session_dir, label, 1)]
        wall_budget_s = AB_CHAIN_WALL_FACTOR * self.options.ab_budget_s
        while True:
            if manifest.status not in ("completed", "finished_early"):
                return  # a crash or a timeout repeats: the verdict says what happened
            logs = [log for log in (load_ab_log(r) for r in runs) if log is not None]
            if len(logs) < len(runs):
                return
            pooled = [pool(logs, c.label) for c in design.comparisons]
            still = [p for p in pooled if p is not None and p.ended == SCRIPT_ENDED]
            if not still:
                return
            spent_s = sum(log.measure_s for log in logs)
            why_not = continuation_refusal(
                processes=len(runs),
                spent_s=spent_s,
                rounds_done=sum(log.rounds for log in logs),
                budget_s=design.budget_s,
                elapsed_s=time.monotonic() - started,
                wall_budget_s=wall_budget_s,
            )
            arms, comparisons = _open_design(design, [p.label for p in still])
            block = block_steps_to_fit(
                manifest.steps_seen,
                self.options.plan.warmup_steps,
                len(arms),
                design.settle_steps,
                CONTINUATION_ROUNDS,
                design.statistic,
                warmup_arms=sum(needs_warmup_block(a.optimizations) for a in arms),
            )
            if why_not is None and block is None:
                why_not = f"a script of {manifest.steps_seen} steps holds no block of each arm"
            if why_not is not None:
                for p in still:
                    self._update_variant(p.label, rounds_stop=f"not started again: {why_not}")
                self.sink.note(
                    f"in-process A/B: {', '.join(p.label for p in still)} undecided when the "
                    f"script ended; not started again: {why_not}"
                )
                return
            assert block is not None  # why_not is set when no block fits
            previous = logs[-1].block_steps or block
            repeat = len(runs) + 1
            self.sink.note(
                f"the script ended after {manifest.steps_seen} steps before "
                f"{', '.join(p.label for p in still)} decided: starting it again "
                f"(process {repeat}), pooling its pairs with the "
                f"{sum(len(p.pairs) for p in still)} so far"
            )
            follow = replace(
                design,
                arms=arms,
                comparisons=comparisons,
                block_steps=min(block, previous),
                budget_s=round(max(1.0, design.budget_s - spent_s), 1),
                prior_runs=tuple(str(r) for r in runs),
            )
            ids = tuple(dict.fromkeys(i for arm in arms for i in arm.optimizations))
            run_dir = child_dir(self.session_dir, label, repeat)
            rel = str(run_dir.relative_to(self.session_dir))
            open_labels = {c.label for c in comparisons}
            for variant in self.session.variants:
                if variant.ab_run is not None and variant.label in open_labels:
                    self._update_variant(variant.label, ab_runs=(*variant.ab_runs, rel))
            manifest = self.run(
                label, ids or tuple(fixes), repeat=repeat, planned_runs=self.started + 1, ab=follow
            )
            runs.append(run_dir)

    def run_ab_rounds(self, variants: list[VariantPlan], *, baseline_first: bool = False) -> None:
        """Alternate baseline and candidates: round r runs [B_r,] C1..Ck, reversed on even
        rounds, so a linear drift of the machine cancels out of the paired ratios. Each round
        is one pair per variant for the measurement engine (optimize/engine.py); at the
        engine's looks for whole runs (from --repeat rounds, at least 3) every variant is
        judged, and a decided one stops. The undecided go on, one round at a time, within
        --max-rounds and the time budget of the rounds past the first look (--round-budget,
        else DEFAULT_BUDGET_FACTOR x what the rounds up to it took)."""
        for variant in variants:
            self.session = self.session.with_variant(self._with_prediction(variant))
        save_session(self.session_dir, self.session)

        looks = diagnose.session_looks(self.session)
        first, most = looks.first_look, looks.max_pairs
        started = time.monotonic()
        runs_before = self.started
        pending = list(variants)
        budget_s, past_first = 0.0, started  # set once the first look's rounds are done
        rounds = 0
        run_s = 0.0
        while pending:
            if rounds >= min(first, most):
                run_s = (time.monotonic() - started) / max(1, self.started - runs_before)
                spent_s = time.monotonic() - past_first
                why = _rounds_stop(rounds, most, budget_s, spent_s, run_s * (1 + len(pending)))
                if why is not None:
                    for variant in pending:
                        self._update_variant(variant.label, rounds_stop=why)
                    return
            rounds += 1
            runs_left = (max(min(first, most), rounds) - rounds + 1) * (1 + len(pending))
            if not baseline_first and rounds == 1:
                runs_left -= 1  # the profiled baseline run is round 1's
            extra = (rounds, most) if rounds > first else None
            if extra is not None:
                self.deadline = time.monotonic() + (most - rounds + 1) * run_s * (1 + len(pending))
            pending = self._one_round(
                pending, rounds, self.started + runs_left, extra, baseline_first or rounds > 1
            )
            if rounds == first:
                past_first = time.monotonic()
                budget_s = (
                    self.options.round_budget_s
                    if self.options.round_budget_s is not None
                    else DEFAULT_BUDGET_FACTOR * (past_first - started)
                )
            if pending and (rounds in looks.at or rounds == most):
                pending = self._decided_drop(pending, rounds)
                if pending and rounds == first and rounds < most:
                    self.sink.note(
                        f"undecided after {rounds} rounds: {', '.join(v.label for v in pending)}; "
                        f"more rounds, up to {most}"
                    )

    def _one_round(
        self,
        pending: list[VariantPlan],
        rounds: int,
        planned: int,
        extra: tuple[int, int] | None,
        with_baseline: bool,
    ) -> list[VariantPlan]:
        """Round `rounds`: a baseline run (round 1 of a session's singles has the profiled
        one), then each pending variant, reversed on even rounds; returns those still to
        measure (a crashing variant keeps crashing)."""
        if with_baseline:
            base = self.run(
                BASELINE_LABEL,
                (),
                repeat=self.baseline_repeats + 1,
                planned_runs=planned,
                extra_round=extra,
            )
            if base.status in FAILED_STATUSES and extra is not None:
                for variant in pending:
                    self._update_variant(
                        variant.label, rounds_stop=f"a baseline run failed in round {rounds}"
                    )
                return []
        ordered = pending if rounds % 2 == 1 else list(reversed(pending))
        still = list(pending)
        for variant in ordered:
            manifest = self.run(
                variant.label,
                variant.optimizations,
                repeat=rounds,
                planned_runs=planned,
                extra_round=extra,
            )
            if manifest.status in FAILED_STATUSES:
                still = [v for v in still if v.label != variant.label]
        return still

    def _decided_drop(self, pending: list[VariantPlan], rounds: int) -> list[VariantPlan]:
        """A look of the engine: the variants it decided stop (accepted; rejected: slower, no
        gain, not applied, numerics), the undecided go on."""
        results = self._verdicts()
        still = []
        for variant in pending:
            result = results.get(variant.label)
            if result is None:  # no run of it left a record: nothing to add
                self._update_variant(variant.label, rounds_stop="no verdict to refine")
            elif result.verdict == "undecided":
                still.append(variant)
            else:
                self._update_variant(variant.label, rounds_stop=f"decided after {rounds} rounds")
        return still

    def _with_prediction(self, variant: VariantPlan) -> VariantPlan:
        """dataloader-workers (alone, or coupled with the threads the cores leave), sized
        from the baseline's split: what the sizing predicted it buys, for the report to
        check against the measurement."""
        sizing = self.sizings.get("dataloader-workers")
        predicted = getattr(sizing, "predicted_speedup", None)
        # The split's model has no contention: it predicts the workers with the cores to
        # themselves, what the coupled variant (the threads the cores leave) measures too.
        workers_only = ("dataloader-workers",)
        coupled = ("dataloader-workers", "cpu-threads")
        if variant.optimizations not in (workers_only, coupled) or predicted is None:
            return variant
        if variant.peel_of is not None or variant.stacked:
            return variant  # a stack of accepted fixes, or a peel: not the sized change
        return replace(
            variant,
            predicted_speedup=predicted,
            predicted_from=getattr(sizing, "predicted_from", "") or None,
        )

    def _verdicts(self) -> dict[str, VariantResult]:
        results = diagnose.compare_variants(self.session_dir, parse_traces=False)
        return {r.label: r for r in results}

    def _update_variant(self, label: str, **changes: object) -> None:
        variants = tuple(
            replace(v, **changes) if v.label == label else v  # type: ignore[arg-type]
            for v in self.session.variants
        )
        self.session = replace(self.session, variants=variants)
        save_session(self.session_dir, self.session)

    def _output_snapshot(self) -> rerun_outputs.Snapshot:
        return rerun_outputs.snapshot(self.options.cwd, exclude=(self.options.runs_root,))

    def _remove_rerun_outputs(self, before: rerun_outputs.Snapshot) -> None:
        try:
            created = rerun_outputs.created_since(before, self._output_snapshot())
            removed = rerun_outputs.remove(self.options.cwd, created)
        except OSError as err:  # the run's results matter more than the tidying
            log.warning("could not tidy what a re-run left behind: %s", err)
            return
        if removed:
            self.session = replace(
                self.session, removed_outputs=(*self.session.removed_outputs, *removed)
            )
            save_session(self.session_dir, self.session)


def _rounds_stop(
    rounds: int, most: int, budget_s: float, spent_s: float, next_round_s: float
) -> str | None:
    """Why the undecided variants get no more re-run rounds (None: one more round).
    `spent_s`: what the rounds past the first look took so far; `next_round_s`: one more
    (a baseline run and each undecided variant's), guessed from the runs so far."""
    if rounds >= most:
        return f"still undecided after {rounds} rounds: --max-rounds {most} reached"
    if spent_s + next_round_s > budget_s:
        return (
            f"still undecided after {rounds} rounds: another round (~{next_round_s:.0f}s) would "
            f"overrun the {budget_s:.0f}s budget for the rounds past the first look "
            "(--round-budget)"
        )
    return None


def continuation_refusal(
    *,
    processes: int,
    spent_s: float,
    rounds_done: int,
    budget_s: float,
    elapsed_s: float,
    wall_budget_s: float,
) -> str | None:
    """Why the in-process chain is not started again (None: it is). A new process always
    finishes its first round (every verdict needs its pairs), so it is started only when
    one more round, at what a round has taken so far, stays within the overrun a round may
    take past the budget (inprocess.ROUND_OVERRUN_FACTOR): the README demo once started a
    5th process for 1 s of budget with 5 s rounds; with one busy core, 9.9 s left of 16.7 s
    rounds still bought the pair that decided."""
    per_round_s = spent_s / rounds_done if rounds_done else 0.0
    if processes >= MAX_AB_PROCESSES:
        return f"{MAX_AB_PROCESSES} processes"
    if spent_s >= budget_s:
        return f"the {budget_s:g}s measurement budget"
    if spent_s + per_round_s > ROUND_OVERRUN_FACTOR * budget_s:
        return (
            f"the {budget_s - spent_s:.1f}s left of the {budget_s:g}s measurement budget: "
            f"one more round ({per_round_s:.1f}s) would overrun it by more than "
            f"{ROUND_OVERRUN_FACTOR - 1:.0%}"
        )
    if elapsed_s >= wall_budget_s:
        return f"the {wall_budget_s:g}s budget of the chain"
    return None


def _open_design(
    design: ABDesign, labels: Sequence[str]
) -> tuple[tuple[Arm, ...], tuple[Comparison, ...]]:
    """The arms and comparisons of `design` that the comparisons `labels` need, renumbered."""
    wanted = [c for c in design.comparisons if c.label in labels]
    used = sorted({i for c in wanted for i in (c.reference, c.test)})
    index = {old: new for new, old in enumerate(used)}
    arms = tuple(design.arms[i] for i in used)
    comparisons = tuple(Comparison(c.label, index[c.reference], index[c.test]) for c in wanted)
    return arms, comparisons


def _sizings(
    diagnosis: diagnose.Diagnosis, candidates: Sequence[str], sink: ProgressSink
) -> dict[str, Sizing]:
    """What the candidates whose catalog entry has a sizing hook get from the baseline (e.g.
    dataloader-workers: the workers, from the measured split of the step). A sizing whose
    environment the user already set themselves (PERFDOCTOR_DATALOADER_WORKERS) is theirs to
    keep: their value reaches the child as it is."""
    sizings: dict[str, Sizing] = {}
    for opt_id in candidates:
        entry = CATALOG.get(opt_id)
        if entry is None or entry.sizing is None:
            continue
        sizing = entry.sizing(diagnosis.facts, _usable_cores(diagnosis))
        if sizing is None or any(os.environ.get(name) for name in sizing.env()):
            continue
        sink.note(f"{opt_id}: {sizing.summary}")
        sizings[opt_id] = sizing
    return sizings


def _usable_cores(diagnosis: diagnose.Diagnosis) -> int:
    """The cores the baseline's child could run on (its CPU affinity), else this process's;
    in a multi-rank run, one rank's share of them."""
    cpu = diagnosis.record.observed.cpu
    affinity = cpu.affinity_cores if cpu is not None else None
    if affinity is not None and affinity > 0:
        cores = affinity
    else:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # macOS / Windows
            cores = os.cpu_count() or 1
    ranks = diagnosis.facts.get("ranks_launched")
    return max(1, cores // ranks) if isinstance(ranks, int) and ranks > 1 else cores


def _session_name(target: Target) -> str:
    """The script's name; for a launcher command, the script it launches (`torchrun ...
    train.py` -> train.py), else the launcher's."""
    if target.kind == "command":
        return next((a for a in target.argv if a.endswith(".py")), target.name)
    return target.name


def _env_for(optimizations: Sequence[str]) -> dict[str, str]:
    """Optimizations of kind "env" act through the child's environment, merged with the
    user's own settings (a PYTORCH_CUDA_ALLOC_CONF they set keeps its keys)."""
    from perfdoctor.optimize.catalog import env_for

    return env_for(optimizations, os.environ)


ProgressCallback = Callable[[object], None]
