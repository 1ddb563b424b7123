"""`perfdoctor mcp`: perfdoctor's tools for coding agents, as an MCP server over stdio.

Built on the official MCP Python SDK (the optional extra `perfdoctor[agent]`). Stdio only:
the server opens no network port. Every path an agent gives must lie under the --root the
server was started with (or its --out directory); a path outside it, a missing one, or an
unknown id is a tool error (`is_error`), and the server carries on.

Each tool answers with the brief as text (render/brief.py) and the same data as structured
JSON: the headline with its evidence and the user's source lines, each verdict with its
interval, load and method, and the fixes.patch path where the session has one.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from perfdoctor import __version__
from perfdoctor.errors import PerfdoctorError, UsageError
from perfdoctor.handover import workspace as work
from perfdoctor.handover.profile_run import ProfileRequest, run_profile, stop_all
from perfdoctor.rundir import REPORT_JSON

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "perfdoctor profiles an unmodified PyTorch training script, diagnoses what holds it back, "
    "applies fixes at runtime in measured re-runs and judges each with an interval. Keep a "
    "code change only when its verdict is `accepted`; apply the session's fixes.patch rather "
    "than retyping a fix. `perfdoctor skill` prints the full guide."
)


def _result(answer: work.Answer) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=answer.text)], structured_content=answer.data
    )


def _tool_error(err: PerfdoctorError) -> ToolError:
    hint = f" ({err.hint})" if err.hint else ""
    return ToolError(f"{err}{hint}")


async def _in_thread(fn: Callable[[], work.Answer]) -> CallToolResult:
    """Analysis reads files and can take seconds: off the event loop, so the server goes on
    answering (a cancel, a ping) meanwhile."""
    try:
        return _result(await anyio.to_thread.run_sync(fn))
    except PerfdoctorError as err:
        raise _tool_error(err) from None


def build_server(root: Path, out: Path | None = None) -> MCPServer:
    ws = work.Workspace.at(root, out)
    server = MCPServer(
        name="perfdoctor", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(
        description="Profile a training script under the root: baseline run, diagnosis, then "
        "(apply=true) each runtime fix measured against the baseline with an interval. "
        "Sends progress (stage, pairs so far, ETA); a cancel stops the run and keeps its "
        "partial report. `only`/`skip`: optimization ids. Returns the brief: headline, "
        "findings with the user's lines, verdicts, fixes.patch."
    )
    async def profile(
        ctx: Context,
        script: str,
        args: list[str] | None = None,
        only: list[str] | None = None,
        skip: list[str] | None = None,
        steps: int | None = None,
        warmup: int | None = None,
        profile_steps: int | None = None,
        apply: bool = True,
        repeat: int | None = None,
        ab_budget_s: float | None = None,
        timeout_s: float | None = None,
    ) -> CallToolResult:
        try:
            path = ws.script(script)
            work.check_optimization_ids(only, "only")
            work.check_optimization_ids(skip, "skip")
            for name, value in (("steps", steps), ("repeat", repeat)):
                if value is not None and value < 1:
                    raise UsageError(f"{name} must be at least 1")
        except PerfdoctorError as err:
            raise _tool_error(err) from None
        request = ProfileRequest(
            script=path,
            args=tuple(args or ()),
            cwd=ws.root,
            out=ws.out,
            steps=steps,
            warmup=warmup,
            profile_steps=profile_steps,
            apply=apply,
            only=tuple(only) if only else None,
            skip=tuple(skip or ()),
            repeat=repeat,
            ab_budget_s=ab_budget_s,
            timeout_s=timeout_s,
        )

        async def progress(done: float, total: float | None, message: str) -> None:
            await ctx.report_progress(done, total, message)

        done = await run_profile(request, progress)
        if done.session_dir is None or not (done.session_dir / REPORT_JSON).is_file():
            reason = next(
                (line for line in reversed(done.stderr_tail) if "error" in line.lower()),
                done.stderr_tail[-1] if done.stderr_tail else "no report was written",
            )
            raise ToolError(f"profile failed (exit {done.exit_code}): {reason}")
        return await _in_thread(
            functools.partial(_session_answer, done.session_dir, done.exit_code, ws.root)
        )

    @server.tool(
        description="Diagnose torch.profiler traces recorded anywhere under the root: a "
        "trace file, a directory or TensorBoard logdir, or a CUDA memory snapshot (.pickle). "
        "Nothing is run or applied."
    )
    async def diagnose(paths: list[str]) -> CallToolResult:
        return await _in_thread(functools.partial(work.diagnose, ws, paths))

    @server.tool(
        description="Compare two runs (session directories, or `previous` and `latest` of "
        "`script`): B judged against A with an interval. fail_if_slower / "
        "fail_if_more_memory (percent) add the regression gate: passed, failed or undecided."
    )
    async def compare(
        run_a: str,
        run_b: str,
        fail_if_slower: float | None = None,
        fail_if_more_memory: float | None = None,
        strict: bool = False,
        script: str | None = None,
    ) -> CallToolResult:
        return await _in_thread(
            functools.partial(
                work.compare, ws, run_a, run_b, fail_if_slower, fail_if_more_memory, strict, script
            )
        )

    @server.tool(
        description="A session's report (a path, or `latest`), re-analysed: format brief "
        "(default), json, md, or html (the file's path)."
    )
    async def report(run: str = "latest", format: str = "brief") -> CallToolResult:
        return await _in_thread(functools.partial(work.report, ws, run, format))

    @server.tool(
        description="Explain one rule id (e.g. anomaly-detection-on) or optimization id "
        "(e.g. anomaly-off): its thresholds and their sources, what the fix changes, its risk "
        "and how perfdoctor verifies it."
    )
    async def explain(id: str) -> CallToolResult:
        return await _in_thread(functools.partial(work.explain, id))

    @server.tool(
        description="The sessions profiled under the server's --out directory, newest first "
        "(of `script` when given): date, arguments, step time p50, headline, accepted fixes, "
        "fixes.patch."
    )
    async def history(script: str | None = None, limit: int = 20) -> CallToolResult:
        return await _in_thread(functools.partial(work.history, ws, script, limit))

    return server


def _session_answer(session_dir: Path, exit_code: int, root: Path) -> work.Answer:
    """The finished (or partial) session's brief, from the report.json it wrote."""
    from perfdoctor.render.json_report import report_from_dict

    data: Any = json.loads((session_dir / REPORT_JSON).read_text(encoding="utf-8"))
    result = work.answer(report_from_dict(data), root, perfdoctor_exit_code=exit_code)
    if exit_code != 0:
        result = work.Answer(
            result.data,
            result.text + f"perfdoctor profile exited {exit_code} (README, Exit codes)\n",
        )
    return result


def _stop_profiles_on(signum: int, _frame: object) -> None:
    """A client that closes the server (the SDK sends SIGTERM to its process group) must not
    leave a training run behind: the profiles run in sessions of their own, out of reach of
    that signal. Each is told to stop (it keeps its partial report), then the server ends as
    the signal would have ended it."""
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def serve(root: Path, out: Path | None = None) -> None:
    """Serve on stdin/stdout until the client closes them."""
    server = build_server(root, out)
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, _stop_profiles_on)
    server.run("stdio")
