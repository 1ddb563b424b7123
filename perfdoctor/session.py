"""session.json: what one `perfdoctor profile` invocation asked for, and which runs it made.

Written by the pipeline before the first run and updated after each one, so a session that
was interrupted still says what ran. Pure: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfdoctor import __version__
from perfdoctor.model import StepPlan, Target
from perfdoctor.rundir import SCHEMA_VERSION, SESSION_FILE, read_json, write_json


@dataclass(frozen=True)
class VariantPlan:
    """One variant: a label and the optimization ids applied together."""

    label: str
    optimizations: tuple[str, ...]
    stacked: bool = False  # the accepted optimizations together
    runs: tuple[str, ...] = ()  # child run dirs, relative to the session, in run order
    # Why the variant's rounds stopped (decided at a look, --max-rounds, the budget), or why
    # an in-process chain was not started again (optimize/engine.py).
    rounds_stop: str | None = None
    # "in-process": the speed comes from comparison `label` of the A/B child run `ab_run`
    # (relative to the session), and `runs` are the variant's seeded runs for numerics;
    # "re-runs": `runs` alternate with the baseline's (optimize/estimate.py).
    method: str = "re-runs"
    ab_run: str | None = None
    # Later A/B child runs of the same chain: the script ended before the comparison decided,
    # it was started again, and their pairs pool with `ab_run`'s (optimize/engine.py).
    ab_runs: tuple[str, ...] = ()
    # The engine's statistic for this variant's pairs (optimize/engine.py) and why.
    statistic: str | None = None
    statistic_why: str | None = None
    # A peel comparison (the stack against the stack without one fix): the fix it prices.
    peel_of: str | None = None
    # dataloader-workers alone: what the sizing predicted from the baseline's split
    # (optimize/sizing.py), checked against the measurement in the report.
    predicted_speedup: float | None = None
    predicted_from: str | None = None


@dataclass(frozen=True)
class Session:
    target: Target
    cwd: str
    plan: StepPlan
    seed: int | None
    repeat: int
    apply: bool
    created_at: str
    baseline_runs: tuple[str, ...] = ()
    variants: tuple[VariantPlan, ...] = ()
    run_order: tuple[str, ...] = ()  # every child run dir in the order it ran (A B A B ...)
    options: dict[str, Any] = field(default_factory=dict)
    # Set when perfdoctor itself was stopped (Ctrl-C, SIGTERM, SIGHUP) before the session's
    # plan was done: {"by": "SIGTERM", "exit_code": 143, "during": "<child run dir>"}.
    interrupted: dict[str, Any] | None = None
    # What perfdoctor's own re-runs left in the script's log folders and perfdoctor removed
    # (rerun_outputs.py), relative to `cwd`.
    removed_outputs: tuple[str, ...] = ()
    # The script's repository when the session started (history/git_info.py):
    # {"commit": "<sha>", "dirty": bool}; None outside a git repository.
    git: dict[str, Any] | None = None
    perfdoctor_version: str = __version__
    schema_version: int = SCHEMA_VERSION

    @property
    def script_display(self) -> str:
        return self.target.name if self.target.kind != "module" else f"-m {self.target.name}"

    def with_run(self, label: str, run_rel: str) -> Session:
        order = (*self.run_order, run_rel)
        if label == "baseline":
            return replace(self, baseline_runs=(*self.baseline_runs, run_rel), run_order=order)
        variants = tuple(
            replace(v, runs=(*v.runs, run_rel)) if v.label == label else v for v in self.variants
        )
        return replace(self, variants=variants, run_order=order)

    def with_variant(self, variant: VariantPlan) -> Session:
        kept = tuple(v for v in self.variants if v.label != variant.label)
        return replace(self, variants=(*kept, variant))


def save_session(session_dir: Path, session: Session) -> None:
    write_json(session_dir / SESSION_FILE, session)


def load_session(session_dir: Path) -> Session:
    data = read_json(session_dir / SESSION_FILE)
    target = data["target"]
    return Session(
        target=Target(kind=target["kind"], name=target["name"], argv=tuple(target["argv"])),
        cwd=data["cwd"],
        plan=StepPlan(**data["plan"]),
        seed=data.get("seed"),
        repeat=data.get("repeat", 1),
        apply=data.get("apply", False),
        created_at=data.get("created_at", ""),
        baseline_runs=tuple(data.get("baseline_runs", ())),
        variants=tuple(
            VariantPlan(
                label=v["label"],
                optimizations=tuple(v["optimizations"]),
                stacked=v.get("stacked", False),
                runs=tuple(v.get("runs", ())),
                rounds_stop=v.get("rounds_stop"),
                method=str(v.get("method", "re-runs")),
                ab_run=v.get("ab_run"),
                ab_runs=tuple(v.get("ab_runs", ())),
                statistic=v.get("statistic"),
                statistic_why=v.get("statistic_why"),
                peel_of=v.get("peel_of"),
                predicted_speedup=v.get("predicted_speedup"),
                predicted_from=v.get("predicted_from"),
            )
            for v in data.get("variants", ())
        ),
        run_order=tuple(data.get("run_order", ())),
        options=dict(data.get("options", {})),
        interrupted=data.get("interrupted") if isinstance(data.get("interrupted"), dict) else None,
        removed_outputs=tuple(str(p) for p in data.get("removed_outputs", ())),
        git=data.get("git") if isinstance(data.get("git"), dict) else None,
        perfdoctor_version=data.get("perfdoctor_version", ""),
        schema_version=data.get("schema_version", SCHEMA_VERSION),
    )
