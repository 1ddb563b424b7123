"""The headline of several ranks' traces of one job: the job's one cause is the late rank's
(analyze/job_ranks.py), so the headline says which rank it is before what slows it."""

from __future__ import annotations

from perfdoctor.model import Report


def job_prefix(report: Report) -> str:
    """'Rank 7 holds the job up (the other ranks wait 4.5 ms per step for it); on rank 7: '
    when the report diagnoses the late rank of several traced ranks and the rank-straggler
    finding names it, else ''."""
    facts = report.facts
    # Only where the rank-straggler rule judged the others' wait worth a finding: a rank
    # that is last by a hair holds nobody up.
    if not any(f.rule_id == "rank-straggler" for f in report.findings):
        return ""
    rank = facts.get("job_late_rank")
    held = facts.get("job_held_ms_per_step")
    if not isinstance(rank, int) or isinstance(rank, bool):
        return ""
    wait = (
        f" (the other ranks wait {held:.1f} ms per step for it)"
        if isinstance(held, (int, float))
        else ""
    )
    return f"Rank {rank} holds the job up{wait}; on rank {rank}: "


JOB_OWN_WORDS = "the job's step less its wait for later ranks in collectives"


def job_rank_note(report: Report) -> str:
    """Added to the ranks table's note when the ranks' collectives were matched across their
    traces (analyze/job_ranks.py): what `own` is then."""
    if report.facts.get("job_collectives_matched") is None:
        return ""
    return (
        " Collectives matched across the traces: the rank whose collective kernels are the "
        "shortest arrives last and waits for nobody; own is then "
        f"{JOB_OWN_WORDS} (one profiled step's span differs between ranks by where each "
        "host's ProfilerStep fell), and the first row is the rank this report diagnoses."
    )
