"""The `perfdoctor` command. Thin: parse -> call the pipeline -> render -> exit code.

Exit codes are documented in perfdoctor/errors.py and the README.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perfdoctor import __version__
from perfdoctor.cli_guard import (
    CliSettings,
    guarded,
    make_console,
    output_unwritable,
    stderr_console,
)
from perfdoctor.cli_options import ProfileArgs, declared_by, profile_options
from perfdoctor.errors import OutputUnwritable, PerfdoctorError, ProfileStopped, UsageError

app = typer.Typer(
    name="perfdoctor",
    help="Find what holds your PyTorch training back, fix it at runtime, and measure the fix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    # Eager: runs while the command line is parsed, so `perfdoctor --version` alone works
    # (a group's callback only runs once a command is given).
    if value:
        typer.echo(f"perfdoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    ctx: typer.Context,
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
    # Every command's context inherits ctx.obj: the guard reads --debug there.
    ctx.obj = CliSettings(debug=debug or bool(os.environ.get("PERFDOCTOR_DEBUG")))
    logging.basicConfig(
        level=logging.DEBUG if ctx.obj.debug else logging.WARNING,
        format="perfdoctor: %(levelname)s: %(message)s",
    )


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
@guarded
@declared_by(profile_options)
def profile(ctx: typer.Context, **_options: object) -> None:
    # The options are declared once, in cli_options.profile_options (their names are
    # ProfileArgs' fields); typer reads them from there.
    # Everything after the script is the script's, options included: allow_interspersed_args
    # is off, so click stops parsing at the script and leaves the rest in ctx.args.
    # By name: typer may bring its own copy of click's ParameterSource.
    source = ctx.get_parameter_source("repeat")
    given = ProfileArgs.from_params(
        ctx.params, ctx.args, repeat_given=getattr(source, "name", None) == "COMMANDLINE"
    )
    options = given.to_options(Path.cwd())
    check_output_dir(options.runs_root)
    console = stderr_console() if given.as_json else make_console()
    try:
        outcome = _profile(options, console, json_progress=given.progress_json)
    except OSError as err:
        # Everything perfdoctor writes goes under --out: a failure to write there (no space
        # left, a read-only file system) is no bug of perfdoctor's and no fault of the script.
        if not _is_output_error(err, options.runs_root):
            raise
        where = err.filename if err.filename is not None else options.runs_root
        raise OutputUnwritable(
            f"cannot write {os.fsdecode(where)}: {err.strerror or err}",
            hint="free some space, or give --out a directory you can write",
        ) from None
    renderer = "json" if given.as_json else "terminal"
    _print_report(outcome.report, renderer, console)
    if outcome.exit_code != 0:
        _say_the_script_failed(outcome)
    raise typer.Exit(outcome.exit_code)


def check_output_dir(out: Path) -> None:
    """Refuse, before anything runs, an --out that cannot hold the sessions: a file, or a
    directory (or its nearest existing parent) this user cannot write."""
    existing = out
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        where = f"--out {out}" if existing == out else f"--out {out}: {existing}"
        raise OutputUnwritable(
            f"{where} is not a directory",
            hint="give --out a directory (it is created if it does not exist)",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        reason = "permission denied"
        with contextlib.suppress(OSError):
            if os.statvfs(existing).f_flag & os.ST_RDONLY:
                reason = "read-only file system"
        raise OutputUnwritable(
            f"cannot write the output directory {existing}: {reason}",
            hint="give --out a directory you can write",
        )


# A write that fails for want of room (or a file system turned read-only) names no file.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _is_output_error(err: OSError, root: Path) -> bool:
    if err.errno in _NO_ROOM:
        return True
    for name in (err.filename, err.filename2):
        if name is None:
            continue
        path = Path(os.path.abspath(os.fsdecode(name)))
        if path == root or root in path.parents:
            return True
    return False


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
    from perfdoctor.render.format import printable

    # The error and the path come from the script: no raw escape may reach the terminal.
    stderr_console().print(
        printable(f"perfdoctor: {what} (partial report in {outcome.session_dir})"),
        markup=False,
        soft_wrap=True,
    )


def _profile(options, console: Console, json_progress: bool = False):
    from perfdoctor.errors import NoTrainingSteps, RunTimeout
    from perfdoctor.pipeline import profile as run_profile
    from perfdoctor.render.progress import make_progress_sink

    with make_progress_sink(console, as_json=json_progress) as sink:
        try:
            return run_profile(options, sink)
        except (NoTrainingSteps, RunTimeout, ProfileStopped) as err:
            # The partial report exists: show it, then the one-line error.
            _show_latest_partial(options.runs_root, console)
            raise err


def _show_latest_partial(runs_root: Path, console: Console) -> None:
    from perfdoctor.diagnose import analyze_session
    from perfdoctor.rundir import LATEST_LINK

    latest = runs_root / LATEST_LINK
    if latest.exists():
        # The partial report is on disk whatever happens here; a failure to show it (or a
        # second Ctrl-C) must not hide the one-line error that follows.
        with contextlib.suppress(PerfdoctorError, OSError, KeyboardInterrupt):
            _print_report(analyze_session(latest), "terminal", console)


FORMAT_HELP = "terminal, md, html, json or brief (at most ~40 lines, for agents and CI logs)."
MAX_PORT = 65535


def _print_report(built, fmt: str, console: Console | None = None) -> None:
    """Print one Report in format `fmt` (render/registry.py): text to stdout, the terminal
    format on `console` (default: a fresh stdout console)."""
    text = _render(built, fmt, console)
    if text is not None:
        sys.stdout.write(text)


def _render(built, fmt: str, console: Console | None = None) -> str | None:
    from perfdoctor.render.registry import REPORT_RENDERERS, find_renderer

    renderer = find_renderer(REPORT_RENDERERS, fmt)
    if renderer.draws_on_console:
        return renderer.render(built, console or make_console())
    return renderer.render(built)


@app.command(
    help="Re-analyse a run directory and re-render its reports (no torch needed). On a "
    "session directory it rewrites the session's report.json/.md/.html and TensorBoard "
    "scalars; on a lone child run directory it writes nothing into it."
)
@guarded
def report(
    ctx: typer.Context,
    run: Annotated[
        Path,
        typer.Argument(
            help="A session directory (e.g. perfdoctor-runs/latest), a child run directory, or "
            "the --out directory of `perfdoctor profile` (its latest session is used)."
        ),
    ],
    fmt: Annotated[
        str, typer.Option("--format", "-f", metavar="FORMAT", help=FORMAT_HELP)
    ] = "terminal",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Write the report here (its directory must exist) instead of to stdout.",
        ),
    ] = None,
) -> None:
    from perfdoctor.render.registry import REPORT_RENDERERS, find_renderer

    find_renderer(REPORT_RENDERERS, fmt)  # a bad --format is refused before any analysis
    if output is not None:
        _check_output_path(output)
    built, unwritten = _rewritten_report(run)
    text = _render(built, fmt)
    if text is not None and output is None:
        sys.stdout.write(text)
    if unwritten is not None:
        raise unwritten
    if text is None or output is None:
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as err:
        # The directory exists (checked above): a write that fails there is 73, not usage.
        raise output_unwritable(err, output) from None
    stderr_console().print(f"wrote {output}", markup=False)


def _check_output_path(output: Path) -> None:
    """Refuse, before any analysis, a report path that cannot be written: exit code 2."""
    parent = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise UsageError(f"--output {output} is a directory; give a file name")
    if not parent.is_dir():
        raise UsageError(
            f"--output {output}: directory {parent} does not exist",
            hint=f"create it first: mkdir -p {parent}",
        )


def _rewritten_report(run: Path):
    """The report of `run`, after rewriting the session's own report files."""
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
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                # A full disk is no read-only copy: the report still shows, then 73.
                return built, output_unwritable(err, session_dir)
            # A read-only copy of a run: still render to the terminal.
            logging.getLogger(__name__).warning("reports not rewritten: %s", err)
    return built, None


@app.command(
    help="Diagnose torch.profiler traces recorded anywhere (a trace file, a directory, a "
    "TensorBoard logdir with several runs and ranks) and CUDA memory snapshots (.pickle). "
    "Reads its input only; reports go to -o DIR or ./perfdoctor-diagnose/<time>-<name>/."
)
@guarded
def diagnose(
    ctx: typer.Context,
    paths: Annotated[
        list[Path],
        typer.Argument(help="Trace files, directories or logdirs, snapshots."),
    ],
    fmt: Annotated[
        str,
        typer.Option("--format", "-f", metavar="FORMAT", help="What to print: " + FORMAT_HELP),
    ] = "terminal",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Directory for the reports."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print report.json (-f json).")] = False,
    quiet: Annotated[bool, typer.Option(help="Print only where the reports went.")] = False,
) -> None:
    from perfdoctor.diagnose_traces import diagnose_traces, write_trace_reports
    from perfdoctor.errors import EXIT_BAD_RUN_DIR
    from perfdoctor.render.registry import REPORT_RENDERERS, find_renderer

    fmt = "json" if as_json else find_renderer(REPORT_RENDERERS, fmt).name
    if out is not None:
        check_output_dir(out)  # a file, or under one, or not writable: 73 before any work
    done = diagnose_traces(paths, out)
    reports = []
    for item in done:
        if item.report is None:
            stderr_console().print(
                f"perfdoctor: error: {item.run.name}: {item.error}", markup=False, soft_wrap=True
            )
            continue
        try:
            write_trace_reports(item.report)
        except OSError as err:  # a full disk, a read-only file system, no permission
            raise output_unwritable(err, item.report.run_dir) from None
        reports.append(item.report)
    if not quiet:
        _print_diagnosed(reports, fmt, several=len(done) > 1)
    if reports:
        if len(done) == 1:
            where = Path(reports[0].run_dir)
        elif len(reports) > 1:
            # A job's report with a stray trace's beside it: their common folder.
            where = Path(os.path.commonpath([r.run_dir for r in reports]))
        else:
            where = Path(reports[0].run_dir).parent
        stderr_console().print(f"reports written to {where}", markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_RUN_DIR if len(reports) < len(done) else 0)


def _print_diagnosed(reports: list, fmt: str, *, several: bool) -> None:
    if fmt == "json":
        # One JSON document on stdout: the report itself, or {"runs": [...]} for several.
        import json

        from perfdoctor.render.json_report import report_to_dict

        data = (
            {"runs": [report_to_dict(r) for r in reports]}
            if several
            else report_to_dict(reports[0])
        )
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return
    for report in reports:
        _print_report(report, fmt)
    if fmt == "terminal" and several:
        from perfdoctor.render.terminal import render_runs_overview

        render_runs_overview(reports, make_console())


@app.command(
    help="Compare two runs, such as before and after your own change. A run is a session or "
    "run directory, or `latest` / `previous`: a script's newest session in --out and the one "
    "before it (perfdoctor compare previous latest)."
)
@guarded
def compare(
    ctx: typer.Context,
    run_a: Annotated[
        Path, typer.Argument(help="The reference run (before); `previous` or `latest` too.")
    ],
    run_b: Annotated[
        Path, typer.Argument(help="The run to judge (after); `latest` or `previous` too.")
    ],
    script: Annotated[
        str | None,
        typer.Option(
            "--script",
            metavar="SCRIPT",
            help="Whose sessions `latest`/`previous` mean (needed when --out holds several "
            "scripts' sessions).",
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="Where `latest`/`previous` are looked up."),
    ] = Path("perfdoctor-runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    fail_if_slower: Annotated[
        float | None,
        typer.Option(
            "--fail-if-slower",
            metavar="PCT",
            help=(
                "Exit 70 when B's step time is more than PCT% above A's beyond the noise, 71 "
                "when the noise band straddles PCT% (record more runs per side)."
            ),
        ),
    ] = None,
    fail_if_more_memory: Annotated[
        float | None,
        typer.Option(
            "--fail-if-more-memory",
            metavar="PCT",
            help=(
                "Exit 70 when B's peak memory is more than PCT% above A's beyond the noise, "
                "71 when the noise band straddles PCT%."
            ),
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="With a --fail-if limit: 'cannot tell' exits 70 as a regression, not 71.",
        ),
    ] = False,
    measure_more: Annotated[
        bool,
        typer.Option(
            "--measure-more/--no-measure-more",
            help=(
                "With a --fail-if limit: when the gate cannot tell, record up to 6 more runs "
                "of B as it was recorded (its script, arguments and seed), and judge again."
            ),
        ),
    ] = True,
) -> None:
    from perfdoctor.errors import NoTrainingSteps
    from perfdoctor.optimize.compare_runs import compare_sides, load_side, script_display
    from perfdoctor.optimize.regression_gate import evaluate_gate, gate_samples
    from perfdoctor.render.comparison_output import Compared
    from perfdoctor.render.registry import COMPARISON_RENDERERS

    limits = _gate_limits(fail_if_slower, fail_if_more_memory, strict)
    run_a, run_b = _session_alias(run_a, out, script), _session_alias(run_b, out, script)
    # Each side is read once; the comparison and the gate judge the same runs.
    side_a, side_b = load_side(run_a), load_side(run_b)
    result = compare_sides(side_a, side_b)
    gate = (
        evaluate_gate(
            gate_samples(side_a.records),
            gate_samples(side_b.records),
            limits,
            script_display(side_b.records[0]),
        )
        if limits.any
        else None
    )
    if gate is not None and measure_more and _cannot_tell(gate):
        gate = _measure_more(side_a, side_b, limits, gate)
    compared = Compared(result, gate)
    text = COMPARISON_RENDERERS["json" if as_json else "terminal"].render(compared, make_console())
    if text is not None:
        sys.stdout.write(text)
    if compared.gate is not None and not compared.gate.passed:
        # 70: a regression (or unmeasured, or --strict and undecided); 71: undecided. First:
        # a B that cannot be measured fails the gate (70, as documented), not as 67 below.
        if not result.usable:
            stderr_console().print(
                f"perfdoctor: nothing to compare: {result.verdict.reason}",
                markup=False,
                soft_wrap=True,
            )
        raise typer.Exit(compared.gate.exit_code)
    if not result.usable:
        # Nothing was compared: a script or CI reading only the exit code must see it.
        raise NoTrainingSteps(f"nothing to compare: {result.verdict.reason}")


def _session_alias(run: Path, out: Path, script: str | None) -> Path:
    """`latest` / `previous` (history/aliases.py); any other RUN is a path, as before."""
    from perfdoctor.history.aliases import is_alias, resolve_alias

    if not is_alias(run):
        return run
    resolved = resolve_alias(str(run), out, script)
    stderr_console().print(f"{run}: {resolved}", markup=False, soft_wrap=True)
    return resolved


def _cannot_tell(gate) -> bool:  # type: ignore[no-untyped-def]
    """A check whose band straddles its limit, and none that failed outright (--strict
    included: more runs are tried before a 'cannot tell' fails the build)."""
    checks = gate.checks
    return any(c.outcome == "cannot_tell" for c in checks) and not any(
        c.outcome in ("regression", "unmeasured") for c in checks
    )


def _measure_more(side_a, side_b, limits, gate):  # type: ignore[no-untyped-def]
    """An undecided gate records more runs of B by itself (gate_more.py) and judges again,
    a pair of runs at a time, until it decides or the extra runs are spent."""
    from perfdoctor import gate_more
    from perfdoctor.optimize.compare_runs import script_display
    from perfdoctor.optimize.regression_gate import evaluate_gate, gate_samples

    spec = gate_more.rerunnable(side_b.records[0])
    if spec is None:
        return gate
    err = stderr_console()

    def note(text: str) -> None:
        err.print(f"perfdoctor: {text}", markup=False, soft_wrap=True)

    extra: list = []
    while _cannot_tell(gate) and len(extra) < gate_more.MAX_MORE_RUNS:
        more = gate_more.record_more(
            spec, side_b.path, gate_more.RUNS_PER_LOOK, len(extra) + 1, note=note
        )
        if not more:
            break
        extra += more
        gate = evaluate_gate(
            gate_samples(side_a.records),
            gate_samples([*side_b.records, *extra]),
            limits,
            script_display(side_b.records[0]),
        )
        note(f"gate with {len(extra)} more run(s) of B: {gate.summary}")
    return gate


def _gate_limits(slower: float | None, more_memory: float | None, strict: bool):
    from perfdoctor.optimize.regression_gate import GateLimits

    for option, pct in (("--fail-if-slower", slower), ("--fail-if-more-memory", more_memory)):
        # nan compares false with everything: a gate at nan% (or inf%) would always pass.
        if pct is not None and not (math.isfinite(pct) and pct >= 0):
            raise UsageError(f"{option} must be a percentage of 0 or more, not {pct:g}")
    limits = GateLimits(slower, more_memory, strict)
    if strict and not limits.any:
        raise UsageError("--strict needs --fail-if-slower or --fail-if-more-memory")
    return limits


@app.command(
    help="List the sessions of `perfdoctor profile` in the --out directory (an SQLite index "
    "there, rebuilt from the session directories when lost): date, script, arguments, git "
    "commit, step time, headline and accepted fixes."
)
@guarded
def history(
    ctx: typer.Context,
    script: Annotated[
        str | None,
        typer.Argument(help="Only this script's sessions (a path, or the name as profiled)."),
    ] = None,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="DIR", help="The --out directory of profile."),
    ] = Path("perfdoctor-runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    from perfdoctor.errors import TargetNotFound
    from perfdoctor.history import list_sessions
    from perfdoctor.render.history_table import history_json, render_history

    if not out.is_dir():
        raise TargetNotFound(
            f"{out} is not a directory of perfdoctor sessions",
            hint="give the --out directory perfdoctor profile wrote to",
        )
    sessions = list_sessions(out, script)
    if as_json:
        sys.stdout.write(history_json(sessions, str(out), script))
        return
    render_history(sessions, make_console(), out_dir=str(out), script=script)


@app.command(help="List every diagnosis rule: id, what it looks at, thresholds, source.")
@guarded
def rules(ctx: typer.Context) -> None:
    from perfdoctor.render.listings import render_rules

    render_rules(make_console())


@app.command(help="List every optimization perfdoctor knows, and how it applies it.")
@guarded
def optimizations(ctx: typer.Context) -> None:
    from perfdoctor.render.listings import render_optimizations

    render_optimizations(make_console())


@app.command(
    help="Show a run's profiler trace in the trace viewer that torch-tb-profiler ships, "
    "offline: served on 127.0.0.1 (a free port), nothing loaded from the network, "
    "perfdoctor's step and phase markers on a track of their own. Ctrl-C stops it."
)
@guarded
def view(
    ctx: typer.Context,
    run: Annotated[
        Path,
        typer.Argument(
            help="A session directory (its baseline's trace), the --out directory (its latest "
            "session), a child run directory, a rank directory (ranks/<k>) or a trace file."
        ),
    ] = Path("perfdoctor-runs/latest"),
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="Port (default or 0: a free one).")
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Also open the URL in the default web browser.")
    ] = False,
) -> None:
    from perfdoctor.view.prepare import prepare_view
    from perfdoctor.view.server import bind

    if port is not None and not 0 <= port <= MAX_PORT:
        raise UsageError(f"--port must be in 0..{MAX_PORT} (0: a free one), not {port}")
    prepared = prepare_view(run)
    running = bind(prepared.site, port)
    try:
        console = make_console()
        shown = prepared.source.trace or f"none ({prepared.source.steps_dir}/steps.jsonl)"
        console.print(f"trace: {shown}", markup=False, soft_wrap=True)
        if prepared.source.others:
            console.print(
                f"  ({len(prepared.source.others)} more in its directory; give a trace file "
                "to see another)",
                markup=False,
            )
        console.print(prepared.markers.note, markup=False, soft_wrap=True)
        console.print(f"trace viewer on {running.url}  (offline; Ctrl-C stops it)", markup=False)
        if open_browser:
            import webbrowser

            webbrowser.open(running.url)
        running.serve_forever()
    finally:
        running.close()


@app.command(help="Open a run's traces and scalars in TensorBoard (127.0.0.1, a free port).")
@guarded
def tensorboard(
    ctx: typer.Context,
    run: Annotated[
        Path,
        typer.Argument(help="A session directory, or the --out directory (its latest session)."),
    ] = Path("perfdoctor-runs/latest"),
    port: Annotated[
        int | None, typer.Option(metavar="PORT", help="Port (default or 0: a free one).")
    ] = None,
) -> None:
    from perfdoctor.diagnose import resolve_session_dir
    from perfdoctor.tensorboard_launch import (
        profiler_plugin_installed,
        start_tensorboard,
        stop_tensorboard,
    )

    if port is not None and not 0 <= port <= MAX_PORT:
        raise UsageError(f"--port must be in 0..{MAX_PORT} (0: a free one), not {port}")
    logdir = resolve_session_dir(run)
    console = make_console()
    if not profiler_plugin_installed():
        console.print(
            "note: the PyTorch Profiler plugin (torch-tb-profiler) is not installed, so only "
            "the scalars will show. Install it with: pip install 'perfdoctor[tb]'",
            markup=False,
        )
    else:
        console.print(
            "note: the PyTorch Profiler tab needs internet access (its overview loads Google "
            f"Charts from the web); offline, `perfdoctor view {run}` shows the trace itself",
            markup=False,
            soft_wrap=True,
        )
    process = None
    try:
        # Started inside the try: a SIGTERM that lands while the URL is printed (a slow
        # console under load) must stop the server too, not only one in the wait below.
        process, url = start_tensorboard(logdir, port=port or None)
        console.print(f"TensorBoard on {url}  (logdir {logdir}; Ctrl-C stops it)", markup=False)
        while process.poll() is None:
            time.sleep(0.5)
    finally:
        # Ctrl-C, SIGTERM or SIGHUP (cli_guard.stop_signals_as_interrupts): never leave the
        # server running behind us. A stop during start_tensorboard is handled there.
        if process is not None:
            stop_tensorboard(process)


@app.command(
    help="Serve perfdoctor's tools to a coding agent: an MCP server over stdio (no network "
    "port). Scripts and runs are only taken from under --root. Needs the extra: "
    "pip install 'perfdoctor[agent]'."
)
@guarded
def mcp(
    ctx: typer.Context,
    root: Annotated[
        Path,
        typer.Option("--root", metavar="DIR", help="The only directory the tools may run or read."),
    ] = Path("."),
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="DIR", help="Where sessions go (default ROOT/perfdoctor-runs)."
        ),
    ] = None,
) -> None:
    from perfdoctor.errors import MissingTool

    try:
        from perfdoctor.handover.mcp_server import serve
    except ImportError as err:
        raise MissingTool(
            f"the MCP server needs the mcp package ({err.name or err} is missing)",
            hint="pip install 'perfdoctor[agent]'",
        ) from None
    if out is not None:
        check_output_dir(out.absolute())
    serve(root, out)


@app.command(
    help="Print the skill that teaches a coding agent to use perfdoctor (SKILL.md), or write "
    "it into DIR with --write."
)
@guarded
def skill(
    ctx: typer.Context,
    write: Annotated[
        Path | None,
        typer.Option(
            "--write",
            metavar="DIR",
            help="Write DIR/perfdoctor/SKILL.md (an agent's skills folder) instead of printing.",
        ),
    ] = None,
) -> None:
    from perfdoctor.handover.skill import skill_text, write_skill

    if write is None:
        sys.stdout.write(skill_text())
        return
    written = write_skill(write)
    stderr_console().print(f"wrote {written}", markup=False)


def run() -> None:
    """The `perfdoctor` command: the console script and `python -m perfdoctor`."""
    try:
        app(prog_name="perfdoctor")
    finally:
        # Nothing left for the collector at exit: the interpreter's last collections walk
        # every object still alive (modules, numpy's and pydantic's internals), 0.15-0.2 s of
        # CPU, a twentieth of `diagnose` on a 180 MB trace (issue 30). Everything is still
        # freed by reference counting; only finalizers of cyclic garbage left at exit may not
        # run, which Python does not promise anyway.
        gc.freeze()
