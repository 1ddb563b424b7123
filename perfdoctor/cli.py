"""The `perfdoctor` command. Thin: parse -> call the pipeline -> render -> exit code.

Exit codes are documented in perfdoctor/errors.py and the README.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perfdoctor import __version__
from perfdoctor.errors import (
    EXIT_INTERNAL,
    PerfdoctorError,
    ProfileStopped,
    Stopped,
    UsageError,
    interrupt_exit_code,
)

app = typer.Typer(
    name="perfdoctor",
    help="Find what holds your PyTorch training back, fix it at runtime, and measure the fix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

_DEBUG = {"on": False}


def make_console(file=None) -> Console:
    # Imported lazily: rendering modules are not needed for --help.
    from perfdoctor.render.terminal import make_console as _make

    return _make(file)


def _stderr_console() -> Console:
    return make_console(sys.stderr)


def _fail(err: PerfdoctorError) -> typer.Exit:
    console = _stderr_console()
    console.print(f"[bold red]perfdoctor: error:[/] {err}", markup=True, soft_wrap=True)
    if err.hint:
        console.print(f"  hint: {err.hint}", markup=False, soft_wrap=True)
    return typer.Exit(err.exit_code)


# SIGTERM (kill, timeout(1), Slurm, CI cancellation) and SIGHUP (the terminal closed) stop
# perfdoctor as Ctrl-C does; their exit code is 128 + the signal's number.
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _stop_signals_as_interrupts():
    """Turn SIGTERM/SIGHUP into errors.Stopped (a KeyboardInterrupt) in the main thread.

    Without this, Python dies at once on SIGTERM: no manifest, no report, and the child
    (in its own session, so the signal never reaches it) keeps training, re-parented to init.
    A repeated signal while perfdoctor is already stopping is ignored, so that the child's
    grace period and the partial report are not cut short (Ctrl-C still cuts them short).
    """
    stopping = {"by": None}

    def handler(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stopping["by"] is not None:
            logging.getLogger(__name__).info("%s while stopping: ignored", name)
            return
        stopping["by"] = name
        raise Stopped(signum, name)

    previous = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:  # SIGHUP does not exist on Windows
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue  # ignored on purpose (nohup ignores SIGHUP): leave it ignored
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (perfdoctor called from a library)
            continue
    try:
        yield
    finally:
        for sig, old in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)


def _print_traceback() -> None:
    sys.stderr.write(traceback.format_exc())


def _run_guarded(fn, *args, **kwargs):
    """One clear line and a documented exit code for anything a user can cause.

    With --debug the traceback is printed too, and the exit code stays the documented one
    (never 1, which is what a failing user script returns).
    """
    try:
        with _stop_signals_as_interrupts():
            return fn(*args, **kwargs)
    except ProfileStopped as err:
        console = _stderr_console()
        console.print(f"perfdoctor: {err}", markup=False, soft_wrap=True)
        if err.hint:
            console.print(f"  {err.hint}", markup=False, soft_wrap=True)
        raise typer.Exit(err.exit_code) from None
    except PerfdoctorError as err:
        if _DEBUG["on"]:
            _print_traceback()
        raise _fail(err) from None
    except KeyboardInterrupt as err:
        what = "interrupted" if not isinstance(err, Stopped) else f"stopped by {err.name}"
        _stderr_console().print(f"perfdoctor: {what}", markup=False)
        raise typer.Exit(interrupt_exit_code(err)) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:
        if _DEBUG["on"]:
            _print_traceback()
        _stderr_console().print(
            f"perfdoctor: internal error: {type(err).__name__}: {err}"
            + ("" if _DEBUG["on"] else " (run again with --debug for the traceback)"),
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERNAL) from None


def _print_version(value: bool) -> None:
    # Eager: runs while the command line is parsed, so `perfdoctor --version` alone works
    # (a group's callback only runs once a command is given).
    if value:
        typer.echo(f"perfdoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of perfdoctor errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    _DEBUG["on"] = debug or bool(os.environ.get("PERFDOCTOR_DEBUG"))
    logging.basicConfig(
        level=logging.DEBUG if _DEBUG["on"] else logging.WARNING,
        format="perfdoctor: %(levelname)s: %(message)s",
    )


def _split_ids(value: str | None, option: str = "--only") -> tuple[str, ...] | None:
    """Comma-separated optimization ids; an unknown one is a usage error naming the closest
    known id (a typo must not silently run nothing)."""
    if value is None:
        return None
    from perfdoctor.optimize.catalog import CATALOG

    ids = tuple(part.strip() for part in value.split(",") if part.strip())
    for opt_id in ids:
        if opt_id in CATALOG:
            continue
        close = difflib.get_close_matches(opt_id, list(CATALOG), n=1, cutoff=0.5)
        guess = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(
            f"{option}: unknown optimization id {opt_id!r}{guess}",
            hint="perfdoctor optimizations lists them all",
        )
    return ids


def _check_timeout(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a number of seconds above 0, not {value:g}")
    return value


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    },
    # SCRIPT [ARGS] are not a click argument (click would parse the script's own options):
    # the usage line names them here.
    options_metavar="[OPTIONS] SCRIPT [ARGS]...",
    help="Run SCRIPT (everything after it goes to the script), diagnose it, apply fixes "
    "at runtime and measure them. Example: perfdoctor profile train.py --epochs 2",
)
def profile(
    ctx: typer.Context,
    module: Annotated[
        str | None,
        typer.Option("-m", "--module", metavar="MODULE", help="Run a module, as python -m does."),
    ] = None,
    steps: Annotated[
        int, typer.Option(metavar="N", help="Timed steps (hooks only, no profiler).")
    ] = 20,
    warmup: Annotated[int, typer.Option(metavar="N", help="Warm-up steps, not measured.")] = 5,
    profile_steps: Annotated[
        int,
        typer.Option("--profile-steps", metavar="N", help="Steps under torch.profiler (0: none)."),
    ] = 3,
    timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="Seconds before a run is stopped (above 0).",
            callback=_check_timeout,
        ),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed for torch, random and numpy.")] = 0,
    no_seed: Annotated[bool, typer.Option("--no-seed", help="Do not seed.")] = False,
    apply: Annotated[
        bool, typer.Option("--apply/--no-apply", help="Re-run with fixes applied.")
    ] = True,
    only: Annotated[
        str | None,
        typer.Option(metavar="IDS", help="Try only these optimization ids (comma-separated)."),
    ] = None,
    skip: Annotated[
        str | None,
        typer.Option(metavar="IDS", help="Never try these optimization ids (comma-separated)."),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(metavar="N", help="A/B rounds per variant; with --no-apply, baseline runs."),
    ] = 2,
    max_rounds: Annotated[
        int,
        typer.Option(
            "--max-rounds",
            metavar="N",
            help="Rounds in all for a variant still within noise after --repeat rounds.",
        ),
    ] = 6,
    round_budget: Annotated[
        float | None,
        typer.Option(
            "--round-budget",
            metavar="SECONDS",
            help="Time the extra rounds may take (default: twice the --repeat rounds').",
        ),
    ] = None,
    run_to_end: Annotated[
        bool,
        typer.Option(
            "--run-to-end", help="Let the script finish after the measured steps (not stop it)."
        ),
    ] = False,
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Where session directories go.")
    ] = Path("perfdoctor-runs"),
    as_json: Annotated[
        bool, typer.Option("--json", help="Print report.json to stdout (for CI).")
    ] = False,
    nvtx: Annotated[bool, typer.Option(help="Emit NVTX ranges per step and phase.")] = False,
    quiet: Annotated[bool, typer.Option(help="Do not echo the script's output.")] = False,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            "--nproc-per-node",
            "--nproc_per_node",
            metavar="N",
            help="Ranks per run, as torchrun --standalone --nproc-per-node N (DDP scripts).",
        ),
    ] = 1,
    nnodes: Annotated[
        int, typer.Option("--nnodes", help="Nodes of the job; run perfdoctor once per node.")
    ] = 1,
    node_rank: Annotated[
        int, typer.Option("--node-rank", "--node_rank", help="This node's rank (0: the report).")
    ] = 0,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option("--rdzv-endpoint", "--rdzv_endpoint", help="HOST:PORT of node 0."),
    ] = None,
) -> None:
    from perfdoctor.model import StepPlan, Target

    # Everything after the script is the script's, options included: allow_interspersed_args
    # is off, so click stops parsing at the script and leaves the rest in ctx.args.
    args = list(ctx.args)
    if module is None:
        if not args:
            raise _fail(UsageError("no script given: perfdoctor profile SCRIPT [ARGS]..."))
        from perfdoctor.collect.target import is_command

        kind = "command" if is_command(args[0], Path.cwd()) else "script"
        target = Target(kind=kind, name=args[0], argv=tuple(args[1:]))
        if kind == "command" and nproc_per_node > 1:
            raise typer.BadParameter("--nproc-per-node applies to a script, not a launcher command")
    else:
        target = Target(kind="module", name=module, argv=tuple(args))
    for name, value in (
        ("--steps", steps),
        ("--repeat", repeat),
        ("--nproc-per-node", nproc_per_node),
    ):
        if value < 1:
            raise typer.BadParameter(f"{name} must be at least 1")
    if warmup < 0 or profile_steps < 0:
        raise typer.BadParameter("--warmup and --profile-steps cannot be negative")
    if round_budget is not None and round_budget < 0:
        raise typer.BadParameter("--round-budget cannot be negative")
    try:
        only_ids = _split_ids(only, "--only")
        skip_ids = _split_ids(skip, "--skip") or ()
    except UsageError as err:
        raise _fail(err) from None

    nodes = _nodes(nnodes, node_rank, rdzv_endpoint, apply, target)

    from perfdoctor.pipeline import ProfileOptions

    # `--repeat N --no-apply`: N baseline runs, for `compare`'s noise band; only when asked
    # for, so a plain --no-apply stays one run.
    # By name: typer may bring its own copy of click's ParameterSource.
    source = ctx.get_parameter_source("repeat")
    repeat_given = getattr(source, "name", None) == "COMMANDLINE"
    options = ProfileOptions(
        target=target,
        cwd=Path.cwd(),
        runs_root=out,
        plan=StepPlan(warmup_steps=warmup, timed_steps=steps, profiled_steps=profile_steps),
        seed=None if no_seed else seed,
        apply=apply,
        only=only_ids,
        skip=skip_ids,
        repeat=repeat,
        timeout_s=timeout,
        nvtx=nvtx,
        echo_output=not (quiet or as_json),
        nproc_per_node=nproc_per_node,
        nodes=nodes,
        baseline_runs=repeat if repeat_given and not apply else 1,
        run_to_end=run_to_end,
        max_rounds=max_rounds,
        round_budget_s=round_budget,
    )
    console = _stderr_console() if as_json else make_console()
    outcome = _run_guarded(_profile, options, console)
    if as_json:
        from perfdoctor.render.json_report import render_json

        sys.stdout.write(render_json(outcome.report))
    else:
        from perfdoctor.render.terminal import render_terminal

        render_terminal(outcome.report, console)
    if outcome.exit_code != 0:
        _say_the_script_failed(outcome)
    raise typer.Exit(outcome.exit_code)


def _say_the_script_failed(outcome) -> None:
    """The last line says which side failed: a script's own exit code 64..69 or 128+n must
    not be read as one of perfdoctor's (README, "Exit codes"). Printed even with --quiet,
    which hides the script's output and so its traceback."""
    code = outcome.exit_code
    if outcome.script_status == "interrupted":
        return  # the launcher stopped it: the interruption's own message says so
    if outcome.script_status == "launch_failed":
        what = f"the script could not start (exit code {code})"
    elif code > 128 and outcome.script_error and outcome.script_error.startswith("killed by"):
        what = f"the script was {outcome.script_error} (exit code {code} = 128 + {code - 128})"
    else:
        what = f"the script failed with exit code {code}, passed through"
    if outcome.script_error and not outcome.script_error.startswith("killed by"):
        what += f": {outcome.script_error}"
    _stderr_console().print(
        f"perfdoctor: {what} (partial report in {outcome.session_dir})",
        markup=False,
        soft_wrap=True,
    )


def _nodes(nnodes: int, node_rank: int, endpoint: str | None, apply: bool, target):
    """--nnodes/--node-rank/--rdzv-endpoint -> collect.torchrun.Nodes (None on one node)."""
    if nnodes < 1:
        raise typer.BadParameter("--nnodes must be at least 1")
    if nnodes == 1:
        if node_rank != 0 or endpoint is not None:
            raise typer.BadParameter("--node-rank and --rdzv-endpoint need --nnodes > 1")
        return None
    if not 0 <= node_rank < nnodes:
        raise typer.BadParameter(f"--node-rank must be in 0..{nnodes - 1}")
    host, _, port = (endpoint or "").rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's)")
    if apply:
        # Each node decides its variants from its own ranks: they could differ, and every
        # node must run the same runs in the same order to meet at each rendezvous.
        raise typer.BadParameter("--nnodes > 1 profiles the baseline only: add --no-apply")
    if target.kind == "command":
        raise typer.BadParameter("--nnodes applies to a script; a launcher command has its own")
    from perfdoctor.collect.torchrun import Nodes

    return Nodes(nnodes=nnodes, node_rank=node_rank, endpoint=endpoint or "")


def _profile(options, console: Console):
    from perfdoctor.errors import NoTrainingSteps, RunTimeout
    from perfdoctor.pipeline import profile as run_profile
    from perfdoctor.progress import make_progress_sink

    with make_progress_sink(console) as sink:
        try:
            return run_profile(options, sink)
        except (NoTrainingSteps, RunTimeout, ProfileStopped) as err:
            # The partial report exists: show it, then the one-line error.
            _show_latest_partial(options.runs_root, console)
            raise err


def _show_latest_partial(runs_root: Path, console: Console) -> None:
    from perfdoctor.diagnose import analyze_session
    from perfdoctor.render.terminal import render_terminal
    from perfdoctor.rundir import LATEST_LINK

    latest = runs_root / LATEST_LINK
    if latest.exists():
        # The partial report is on disk whatever happens here; a failure to show it (or a
        # second Ctrl-C) must not hide the one-line error that follows.
        with contextlib.suppress(PerfdoctorError, OSError, KeyboardInterrupt):
            render_terminal(analyze_session(latest), console)


FORMATS = ("terminal", "md", "html", "json")


@app.command(
    help="Re-analyse a run directory and re-render its reports (no torch needed). On a "
    "session directory it rewrites the session's report.json/.md/.html and TensorBoard "
    "scalars; on a lone child run directory it writes nothing into it."
)
def report(
    run: Annotated[
        Path,
        typer.Argument(
            help="A session directory (e.g. perfdoctor-runs/latest), a child run directory, or "
            "the --out directory of `perfdoctor profile` (its latest session is used)."
        ),
    ],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="terminal, md, html or json.")
    ] = "terminal",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the report here (its directory must exist) instead of to stdout.",
        ),
    ] = None,
) -> None:
    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    if output is not None:
        _check_output_path(output)
    _run_guarded(_report, run, fmt, output)


def _check_output_path(output: Path) -> None:
    """Refuse, before any analysis, a report path that cannot be written: exit code 2."""
    parent = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise _fail(UsageError(f"--output {output} is a directory; give a file name"))
    if not parent.is_dir():
        raise _fail(
            UsageError(
                f"--output {output}: directory {parent} does not exist",
                hint=f"create it first: mkdir -p {parent}",
            )
        )


def _report(run: Path, fmt: str, output: Path | None) -> None:
    from perfdoctor.diagnose import (
        analyze_session,
        is_lone_child_run,
        resolve_session_dir,
        write_reports,
    )

    session_dir = resolve_session_dir(run)
    built = analyze_session(session_dir)
    # Only a session's own reports are rewritten. A lone child run directory (copied out of
    # its session) gets nothing written into it: scalars under baseline/ would turn it into
    # something `report` no longer recognises.
    if not is_lone_child_run(session_dir):
        try:
            built = write_reports(session_dir, built).report
        except OSError as err:  # a read-only copy of a run: still render to the terminal
            logging.getLogger(__name__).warning("reports not rewritten: %s", err)
    text = _render(built, fmt)
    if text is None:
        return
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write {output}: {err.strerror or err}") from None
        _stderr_console().print(f"wrote {output}", markup=False)


def _render(built, fmt: str) -> str | None:
    if fmt == "terminal":
        from perfdoctor.render.terminal import render_terminal

        render_terminal(built, make_console())
        return None
    if fmt == "md":
        from perfdoctor.render.markdown import render_markdown

        return render_markdown(built)
    if fmt == "html":
        from perfdoctor.render.html import render_html

        return render_html(built)
    from perfdoctor.render.json_report import render_json

    return render_json(built)


@app.command(
    help="Diagnose torch.profiler traces recorded anywhere (a trace file, a directory, a "
    "TensorBoard logdir with several runs and ranks) and CUDA memory snapshots (.pickle). "
    "Reads its input only; reports go to -o DIR or ./perfdoctor-diagnose/<time>-<name>/."
)
def diagnose(
    paths: Annotated[
        list[Path], typer.Argument(help="Trace files, directories or logdirs, snapshots.")
    ],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="What to print: terminal, md, html or json.")
    ] = "terminal",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Directory for the reports.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print report.json (-f json).")] = False,
    quiet: Annotated[bool, typer.Option(help="Print only where the reports went.")] = False,
) -> None:
    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    code = _run_guarded(_diagnose, paths, "json" if as_json else fmt, out, quiet)
    raise typer.Exit(code)


def _diagnose(paths: list[Path], fmt: str, out: Path | None, quiet: bool) -> int:
    from perfdoctor.diagnose_traces import diagnose_traces, write_trace_reports
    from perfdoctor.errors import EXIT_BAD_RUN_DIR

    done = diagnose_traces(paths, out)
    err_console = _stderr_console()
    reports = []
    for item in done:
        if item.report is None:
            err_console.print(
                f"perfdoctor: error: {item.run.name}: {item.error}", markup=False, soft_wrap=True
            )
            continue
        write_trace_reports(item.report)
        reports.append(item.report)
    if not quiet:
        if fmt == "json":
            import json

            from perfdoctor.render.json_report import report_to_dict

            data = (
                report_to_dict(reports[0])
                if len(done) == 1
                else {"runs": [report_to_dict(r) for r in reports]}
            )
            sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        else:
            for report in reports:
                text = _render(report, fmt)
                if text is not None:
                    sys.stdout.write(text)
            if fmt == "terminal" and len(done) > 1:
                from perfdoctor.render.terminal import render_runs_overview

                render_runs_overview(reports, make_console())
    if reports:
        where = Path(reports[0].run_dir) if len(done) == 1 else Path(reports[0].run_dir).parent
        err_console.print(f"reports written to {where}", markup=False, soft_wrap=True)
    return EXIT_BAD_RUN_DIR if len(reports) < len(done) else 0


@app.command(help="Compare two runs, such as before and after your own change.")
def compare(
    run_a: Annotated[Path, typer.Argument(help="The reference run (before).")],
    run_b: Annotated[Path, typer.Argument(help="The run to judge (after).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    fail_if_slower: Annotated[
        float | None,
        typer.Option(
            "--fail-if-slower",
            metavar="PCT",
            help="Exit 70 when B's step time is more than PCT% above A's beyond the noise.",
        ),
    ] = None,
    fail_if_more_memory: Annotated[
        float | None,
        typer.Option(
            "--fail-if-more-memory",
            metavar="PCT",
            help="Exit 70 when B's peak memory is more than PCT% above A's beyond the noise.",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="With a --fail-if limit: 'cannot tell' fails too."),
    ] = False,
) -> None:
    from perfdoctor.regression_gate import GateLimits

    limits = GateLimits(fail_if_slower, fail_if_more_memory, strict)
    if any(pct is not None and pct < 0 for pct in (fail_if_slower, fail_if_more_memory)):
        raise typer.BadParameter("--fail-if-slower and --fail-if-more-memory cannot be negative")
    if strict and not limits.any:
        raise typer.BadParameter("--strict needs --fail-if-slower or --fail-if-more-memory")
    _run_guarded(_compare, run_a, run_b, as_json, limits)


def _compare(run_a: Path, run_b: Path, as_json: bool, limits) -> None:
    from perfdoctor.compare_runs import compare_runs
    from perfdoctor.errors import EXIT_REGRESSION, NoTrainingSteps
    from perfdoctor.regression_gate import run_gate

    result = compare_runs(run_a, run_b)
    gate = run_gate(run_a, run_b, limits) if limits.any else None
    if as_json:
        import json

        from perfdoctor.rundir import to_jsonable

        payload = to_jsonable(result)
        if gate is not None:
            payload["gate"] = to_jsonable(gate)
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        from perfdoctor.render.compare import render_comparison

        console = make_console()
        render_comparison(result, console)
        if gate is not None:
            from perfdoctor.render.gate import render_gate

            render_gate(gate, console)
    if not result.usable:
        # Nothing was compared: a script or CI reading only the exit code must see it.
        raise NoTrainingSteps(f"nothing to compare: {result.verdict.reason}")
    if gate is not None and not gate.passed:
        raise typer.Exit(EXIT_REGRESSION)


@app.command(help="List every diagnosis rule: id, what it looks at, thresholds, source.")
def rules() -> None:
    from perfdoctor.render.listings import render_rules

    render_rules(make_console())


@app.command(help="List every optimization perfdoctor knows, and how it applies it.")
def optimizations() -> None:
    from perfdoctor.render.listings import render_optimizations

    render_optimizations(make_console())


@app.command(help="Open a run's traces and scalars in TensorBoard (127.0.0.1, a free port).")
def tensorboard(
    run: Annotated[
        Path,
        typer.Argument(help="A session directory, or the --out directory (its latest session)."),
    ] = Path("perfdoctor-runs/latest"),
    port: Annotated[int | None, typer.Option(help="Port (default: a free one).")] = None,
) -> None:
    _run_guarded(_tensorboard, run, port)


def _tensorboard(run: Path, port: int | None) -> None:
    from perfdoctor.diagnose import resolve_session_dir
    from perfdoctor.tensorboard_launch import (
        profiler_plugin_installed,
        start_tensorboard,
        stop_tensorboard,
    )

    logdir = resolve_session_dir(run)
    console = make_console()
    if not profiler_plugin_installed():
        console.print(
            "note: the PyTorch Profiler plugin (torch-tb-profiler) is not installed, so only "
            "the scalars will show. Install it with: pip install 'perfdoctor[tb]'",
            markup=False,
        )
    process, url = start_tensorboard(logdir, port=port)
    console.print(f"TensorBoard on {url}  (logdir {logdir}; Ctrl-C stops it)", markup=False)
    try:
        while process.poll() is None:
            time.sleep(0.5)
    finally:
        # Ctrl-C, SIGTERM or SIGHUP (see _stop_signals_as_interrupts): never leave the
        # server running behind us.
        stop_tensorboard(process)
