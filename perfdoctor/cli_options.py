"""`perfdoctor profile`'s command line as one checked value: every rule its options must
follow lives here (a broken one is a UsageError, exit code 2), so the command itself only
parses, runs and renders."""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from perfdoctor.errors import UsageError

if TYPE_CHECKING:
    from perfdoctor.collect.torchrun import Nodes
    from perfdoctor.model import Target
    from perfdoctor.pipeline import ProfileOptions


SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
# A memory size a device can have: "0.5" (half a byte) and 400 nines are no limit at all.
SIZE_MIN_BYTES, SIZE_MAX_BYTES = 1 << 20, 1 << 60
# The largest batch `--want-batch` plans for: 2**24 samples, beyond any global batch trained
# (2**70 made the plan offer 7.4e19 micro-batches of accumulation).
WANT_BATCH_MAX = 1 << 24


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_bytes(value: str | None, option: str) -> int | None:
    """ "8GiB", "8G", "512MB", "1.5T", "4096" -> bytes (binary multiples: memory is counted
    in them); None when not given."""
    if value is None:
        return None
    match = _SIZE.match(value)
    if match is None or float(match[1]) <= 0:
        raise UsageError(f"{option} takes a size such as 8GiB or 512MiB, not {value!r}")
    power = " kmgt".index(match[2].lower() or " ")
    size = float(match[1]) * 1024**power  # inf for 400 nines: refused below, not int(inf)
    if not (SIZE_MIN_BYTES <= size <= SIZE_MAX_BYTES):
        raise UsageError(
            f"{option} must lie between 1MiB and 1EiB (a device's memory), not {value!r}"
        )
    return int(size)


def split_ids(value: str | None, option: str = "--only") -> tuple[str, ...] | None:
    """Comma-separated optimization ids; an unknown one is a usage error naming the closest
    known id (a typo must not silently run nothing)."""
    if value is None:
        return None
    from perfdoctor.optimize.catalog import CATALOG

    ids = tuple(part.strip() for part in value.split(",") if part.strip())
    if not ids:  # "--only ,,," would silently try nothing
        raise UsageError(
            f"{option} names no optimization id: {value!r}",
            hint="perfdoctor optimizations lists them all",
        )
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


@dataclass(frozen=True)
class ProfileArgs:
    """The options of `perfdoctor profile`, named as the command's parameters, and what came
    after the script (`args`). Constructing one checks everything that needs no file system;
    `to_options` finds the target and builds the pipeline's ProfileOptions."""

    args: tuple[str, ...]  # SCRIPT [ARGS] (with -m: the module's ARGS)
    module: str | None = None
    steps: int = 20
    warmup: int = 5
    profile_steps: int = 3
    timeout: float | None = None
    seed: int = 0
    no_seed: bool = False
    apply: bool = True
    only: str | None = None
    skip: str | None = None
    repeat: int = 2
    repeat_given: bool = False  # --repeat on the command line (not its default)
    max_rounds: int = 6
    round_budget: float | None = None
    in_process: bool = True
    ab_budget: float = 60.0
    run_to_end: bool = False
    out: Path = Path("perfdoctor-runs")
    as_json: bool = False
    nvtx: bool = False
    quiet: bool = False
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    plan_batch: bool | None = None
    memory_limit: str | None = None
    want_batch: int | None = None
    keep_effective_batch: bool = False
    progress_json: bool = False  # hidden: progress as JSON lines on stderr (the MCP server)

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], args: Sequence[str], *, repeat_given: bool
    ) -> ProfileArgs:
        """From click's parsed parameters (ctx.params), which carry the same names."""
        known = {f.name for f in fields(cls)}
        given = {k: v for k, v in params.items() if k in known}
        return cls(args=tuple(args), repeat_given=repeat_given, **given)

    def __post_init__(self) -> None:
        if self.module is None and not self.args:
            raise UsageError("no script given: perfdoctor profile SCRIPT [ARGS]...")
        if self.module is None and self.args[0].startswith("-") and self.args[0] != "-":
            # Unknown options pass through to the script, so one before the script lands in
            # its place: say what it is, not "--stepz: no such file".
            raise UsageError(
                f"no such option: {self.args[0]} (perfdoctor profile --help lists them; the "
                "script's own options go after the script)"
            )
        for name, value in (
            ("--steps", self.steps),
            ("--repeat", self.repeat),
            ("--nproc-per-node", self.nproc_per_node),
            ("--max-rounds", self.max_rounds),
        ):
            if value < 1:
                raise UsageError(f"{name} must be at least 1")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            # torch.manual_seed's range; numpy takes the seed modulo 2**32 (bootstrap.py).
            raise UsageError(f"--seed must be in -2**63..2**64-1, not {self.seed}")
        if self.warmup < 0 or self.profile_steps < 0:
            raise UsageError("--warmup and --profile-steps cannot be negative")
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise UsageError(f"--timeout must be a number of seconds above 0, not {self.timeout:g}")
        if self.round_budget is not None and not (
            math.isfinite(self.round_budget) and self.round_budget >= 0
        ):
            raise UsageError("--round-budget cannot be negative")
        if not (math.isfinite(self.ab_budget) and self.ab_budget > 0):
            raise UsageError("--ab-budget must be a number of seconds above 0")
        split_ids(self.only, "--only")
        split_ids(self.skip, "--skip")
        parse_bytes(self.memory_limit, "--memory-limit")
        if self.want_batch is not None and not 1 <= self.want_batch <= WANT_BATCH_MAX:
            raise UsageError(f"--want-batch must be 1..{WANT_BATCH_MAX:,}, not {self.want_batch}")
        self._check_nodes()

    def _check_nodes(self) -> None:
        if self.nnodes < 1:
            raise UsageError("--nnodes must be at least 1")
        if self.nnodes == 1:
            if self.node_rank != 0 or self.rdzv_endpoint is not None:
                raise UsageError("--node-rank and --rdzv-endpoint need --nnodes > 1")
            return
        if not 0 <= self.node_rank < self.nnodes:
            raise UsageError(f"--node-rank must be in 0..{self.nnodes - 1}")
        host, _, port = (self.rdzv_endpoint or "").rpartition(":")
        if not host or not port.isdigit():
            raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's)")
        if self.apply:
            # Each node decides its variants from its own ranks: they could differ, and every
            # node must run the same runs in the same order to meet at each rendezvous.
            raise UsageError("--nnodes > 1 profiles the baseline only: add --no-apply")

    def target(self, cwd: Path) -> Target:
        """What to run; a first word that is a program on PATH (not a script here) is a
        launcher command, which brings its own ranks and nodes."""
        from perfdoctor.model import Target

        if self.module is not None:
            return Target(kind="module", name=self.module, argv=self.args)
        from perfdoctor.collect.target import is_command

        if not is_command(self.args[0], cwd):
            return Target(kind="script", name=self.args[0], argv=self.args[1:])
        if self.nproc_per_node > 1:
            raise UsageError("--nproc-per-node applies to a script, not a launcher command")
        if self.nnodes > 1:
            raise UsageError("--nnodes applies to a script; a launcher command has its own")
        return Target(kind="command", name=self.args[0], argv=self.args[1:])

    def nodes(self) -> Nodes | None:
        if self.nnodes == 1:
            return None
        from perfdoctor.collect.torchrun import Nodes

        return Nodes(
            nnodes=self.nnodes, node_rank=self.node_rank, endpoint=self.rdzv_endpoint or ""
        )

    def to_options(self, cwd: Path) -> ProfileOptions:
        from perfdoctor.model import StepPlan
        from perfdoctor.pipeline import ProfileOptions

        return ProfileOptions(
            target=self.target(cwd),
            cwd=cwd,
            # Absolute, against perfdoctor's own cwd: every path the child is handed must
            # survive a script that calls os.chdir (a relative one would then point into the
            # script's new directory).
            runs_root=Path(os.path.abspath(cwd / self.out)),
            plan=StepPlan(
                warmup_steps=self.warmup,
                timed_steps=self.steps,
                profiled_steps=self.profile_steps,
            ),
            seed=None if self.no_seed else self.seed,
            apply=self.apply,
            only=split_ids(self.only, "--only"),
            skip=split_ids(self.skip, "--skip") or (),
            repeat=self.repeat,
            timeout_s=self.timeout,
            nvtx=self.nvtx,
            echo_output=not (self.quiet or self.as_json),
            nproc_per_node=self.nproc_per_node,
            nodes=self.nodes(),
            # `--repeat N --no-apply`: N baseline runs, for `compare`'s noise band; only when
            # asked for, so a plain --no-apply stays one run.
            baseline_runs=self.repeat if self.repeat_given and not self.apply else 1,
            run_to_end=self.run_to_end,
            max_rounds=self.max_rounds,
            round_budget_s=self.round_budget,
            in_process=self.in_process,
            ab_budget_s=self.ab_budget,
            plan_batch=self.plan_batch,
            memory_limit_bytes=parse_bytes(self.memory_limit, "--memory-limit"),
            want_batch=self.want_batch,
            keep_effective_batch=self.keep_effective_batch,
        )


# --------------------------------------------------------------------------- typer declarations


def profile_options(
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
        typer.Option(
            metavar="N",
            help=(
                "A/B re-run rounds before a variant's first look (at least 3); with "
                "--no-apply, baseline runs (1 unless given)."
            ),
        ),
    ] = 2,
    max_rounds: Annotated[
        int,
        typer.Option(
            "--max-rounds",
            metavar="N",
            help="Re-run rounds in all for a variant still undecided at its looks.",
        ),
    ] = 6,
    round_budget: Annotated[
        float | None,
        typer.Option(
            "--round-budget",
            metavar="SECONDS",
            help="Time the rounds past the first look may take (default: twice the first's).",
        ),
    ] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process/--re-runs",
            help="Measure fixes that can switch between steps in one process (else re-runs).",
        ),
    ] = True,
    ab_budget: Annotated[
        float,
        typer.Option(
            "--ab-budget",
            metavar="SECONDS",
            help="Measurement time of one in-process A/B run (default 60).",
        ),
    ] = 60.0,
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
        int,
        typer.Option(
            "--nnodes", metavar="N", help="Nodes of the job; run perfdoctor once per node."
        ),
    ] = 1,
    node_rank: Annotated[
        int,
        typer.Option(
            "--node-rank", "--node_rank", metavar="N", help="This node's rank (0: the report)."
        ),
    ] = 0,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(
            "--rdzv-endpoint", "--rdzv_endpoint", metavar="HOST:PORT", help="HOST:PORT of node 0."
        ),
    ] = None,
    plan_batch: Annotated[
        bool | None,
        typer.Option(
            "--plan-batch/--no-plan-batch",
            help="Measure peak memory and samples/s per batch size: which batch fits, "
            "which is fastest. Default: apply runs it, within a time budget, when the "
            "diagnosis is about memory or a larger batch; --no-plan-batch never.",
        ),
    ] = None,
    memory_limit: Annotated[
        str | None,
        typer.Option(
            "--memory-limit",
            metavar="SIZE",
            help="--plan-batch: the peak memory allowed (e.g. 8GiB; default: the device's "
            "memory, or the available RAM, less a margin).",
        ),
    ] = None,
    want_batch: Annotated[
        int | None,
        typer.Option(
            "--want-batch",
            metavar="N",
            help="--plan-batch: the batch you want; when it does not fit, the ways to make "
            "it fit are measured.",
        ),
    ] = None,
    keep_effective_batch: Annotated[
        bool,
        typer.Option(
            "--keep-effective-batch",
            help="--plan-batch: keep the effective batch (gradient accumulation).",
        ),
    ] = False,
    progress_json: Annotated[
        bool,
        typer.Option(
            "--progress-json",
            hidden=True,
            help="Progress as JSON lines on stderr, for a program driving perfdoctor.",
        ),
    ] = False,
) -> None:
    """The declaration of `perfdoctor profile`'s options, for typer: each parameter is a
    ProfileArgs field of the same name (a unit test holds them equal). Never called."""


_Command = TypeVar("_Command", bound=Callable[..., Any])


def declared_by(template: Callable[..., Any]) -> Callable[[_Command], _Command]:
    """Gives `command(ctx, **options)` the signature of `template` (a never-called function
    whose parameters are the typer declarations): typer reads a command's parameters through
    inspect.signature and typing.get_type_hints, which follow `__wrapped__` (to the
    template's module for its names) and take `__annotations__`. The command stays a few
    lines long and its options are declared once."""

    def decorate(command: _Command) -> _Command:
        command.__wrapped__ = template  # type: ignore[attr-defined]
        command.__annotations__ = template.__annotations__
        return command

    return decorate
