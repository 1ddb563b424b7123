"""The `perfdoctor` command. Thin: parse -> call the pipeline -> render -> exit code.

Exit codes are documented in perfdoctor/errors.py and the README.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perfdoctor import __version__
from perfdoctor.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    PerfdoctorError,
)

app = typer.Typer(
    name="perfdoctor",
    help="Find what holds your PyTorch training back, fix it at runtime, and measure the fix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def _run_guarded(fn, *args, **kwargs):
    """One clear line and a documented exit code for anything a user can cause."""
    try:
        return fn(*args, **kwargs)
    except PerfdoctorError as err:
        if _DEBUG["on"]:
            raise
        raise _fail(err) from None
    except KeyboardInterrupt:
        _stderr_console().print("perfdoctor: interrupted", markup=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as err:
        if _DEBUG["on"]:
            raise
        _stderr_console().print(
            f"perfdoctor: internal error: {type(err).__name__}: {err} "
            "(run again with --debug for the traceback)",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERNAL) from None


@app.callback()
def main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of perfdoctor errors.")
    ] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    _DEBUG["on"] = debug or bool(os.environ.get("PERFDOCTOR_DEBUG"))
    logging.basicConfig(
        level=logging.DEBUG if _DEBUG["on"] else logging.WARNING,
        format="perfdoctor: %(levelname)s: %(message)s",
    )
    if version:
        typer.echo(f"perfdoctor {__version__}")
        raise typer.Exit(0)


def _split_ids(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


@app.command(
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "allow_interspersed_args": False,
    },
    help="Run SCRIPT (everything after it goes to the script), diagnose it, apply fixes "
    "at runtime and measure them. Example: perfdoctor profile train.py --epochs 2",
)
def profile(
    ctx: typer.Context,
    module: Annotated[
        str | None, typer.Option("-m", "--module", help="Run a module, as python -m does.")
    ] = None,
    steps: Annotated[int, typer.Option(help="Timed steps (hooks only, no profiler).")] = 20,
    warmup: Annotated[int, typer.Option(help="Warm-up steps, not measured.")] = 5,
    profile_steps: Annotated[
        int, typer.Option("--profile-steps", help="Steps under torch.profiler (0: none).")
    ] = 3,
    timeout: Annotated[float | None, typer.Option(help="Seconds before a run is stopped.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for torch, random and numpy.")] = 0,
    no_seed: Annotated[bool, typer.Option("--no-seed", help="Do not seed.")] = False,
    apply: Annotated[
        bool, typer.Option("--apply/--no-apply", help="Re-run with fixes applied.")
    ] = True,
    only: Annotated[
        str | None, typer.Option(help="Try only these optimization ids (comma-separated).")
    ] = None,
    skip: Annotated[
        str | None, typer.Option(help="Never try these optimization ids (comma-separated).")
    ] = None,
    repeat: Annotated[
        int, typer.Option(help="A/B rounds per variant; with --no-apply, baseline runs.")
    ] = 2,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where session directories go.")] = Path(
        "perfdoctor-runs"
    ),
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
            help="Ranks per run, as torchrun --standalone --nproc-per-node N (DDP scripts).",
        ),
    ] = 1,
) -> None:
    from perfdoctor.model import StepPlan, Target

    args = list(ctx.args)
    if module is None:
        if not args:
            raise _fail(PerfdoctorError("no script given: perfdoctor profile SCRIPT [ARGS]..."))
        target = Target(kind="script", name=args[0], argv=tuple(args[1:]))
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
        only=_split_ids(only),
        skip=_split_ids(skip) or (),
        repeat=repeat,
        timeout_s=timeout,
        nvtx=nvtx,
        echo_output=not (quiet or as_json),
        nproc_per_node=nproc_per_node,
        baseline_runs=repeat if repeat_given and not apply else 1,
    )
    console = _stderr_console() if as_json else make_console()
    outcome = _run_guarded(_profile, options, console)
    if as_json:
        from perfdoctor.render.json_report import render_json

        sys.stdout.write(render_json(outcome.report))
    else:
        from perfdoctor.render.terminal import render_terminal

        render_terminal(outcome.report, console)
    raise typer.Exit(outcome.exit_code)


def _profile(options, console: Console):
    from perfdoctor.errors import NoTrainingSteps, RunTimeout
    from perfdoctor.pipeline import profile as run_profile
    from perfdoctor.progress import make_progress_sink

    with make_progress_sink(console) as sink:
        try:
            return run_profile(options, sink)
        except (NoTrainingSteps, RunTimeout) as err:
            # The partial report exists: show it, then the one-line error.
            _show_latest_partial(options.runs_root, console)
            raise err


def _show_latest_partial(runs_root: Path, console: Console) -> None:
    from perfdoctor.diagnose import analyze_session
    from perfdoctor.render.terminal import render_terminal
    from perfdoctor.rundir import LATEST_LINK

    latest = runs_root / LATEST_LINK
    if latest.exists():
        with contextlib.suppress(PerfdoctorError):
            render_terminal(analyze_session(latest), console)


FORMATS = ("terminal", "md", "html", "json")


@app.command(help="Re-analyse a run directory and re-render its reports (no torch needed).")
def report(
    run: Annotated[Path, typer.Argument(help="A session directory, e.g. perfdoctor-runs/latest")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="terminal, md, html or json.")
    ] = "terminal",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here.")] = None,
) -> None:
    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    _run_guarded(_report, run, fmt, output)


def _report(run: Path, fmt: str, output: Path | None) -> None:
    from perfdoctor.diagnose import analyze_session, resolve_session_dir, write_reports

    session_dir = resolve_session_dir(run)
    built = analyze_session(session_dir)
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
        output.write_text(text, encoding="utf-8")
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


@app.command(help="Compare two runs (e.g. before and after your own change).")
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
    from perfdoctor.errors import EXIT_REGRESSION
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
    run: Annotated[Path, typer.Argument(help="A session directory.")] = Path(
        "perfdoctor-runs/latest"
    ),
    port: Annotated[int | None, typer.Option(help="Port (default: a free one).")] = None,
) -> None:
    _run_guarded(_tensorboard, run, port)


def _tensorboard(run: Path, port: int | None) -> None:
    from perfdoctor.diagnose import resolve_session_dir
    from perfdoctor.tensorboard_launch import profiler_plugin_installed, start_tensorboard

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
        if process.poll() is None:
            process.terminate()
