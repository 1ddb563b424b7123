"""The facts of a rank's collectives (comm_trace.CommSummary): what they are, how fast they
moved their bytes against the link, and how much of their time is transfer rather than
waiting for a peer. Declared in fact_catalog.py under "trace: collectives"."""

from __future__ import annotations

from perfdoctor.analyze.comm_trace import CommSummary
from perfdoctor.model import Scalar

# The transfer share is applied only when the collectives whose verdict is known cover at
# least this share of the communication time (a majority; the rest is assumed alike).
MIN_VERDICT_COVERAGE = 0.5


def comm_facts(comm: CommSummary | None, exposed_frac: float | None) -> dict[str, Scalar]:
    if comm is None or not comm.kinds:
        return {}
    top = comm.kinds[0]
    wait = top.wait
    transfer = comm.transfer_frac if comm.verdict_coverage >= MIN_VERDICT_COVERAGE else None
    return {
        "comm_families": ", ".join(comm.families),
        "comm_collective_mix": comm.mix_text(),
        "comm_dominant_collective": top.kind,
        "comm_parallelism": comm.parallelism,
        "comm_group_size": comm.group_size,
        "comm_link_name": comm.link.name if comm.link else None,
        "comm_link_gbs": comm.link.gbs if comm.link else None,
        "comm_busbw_gbs_p50": wait.busbw_gbs_p50,
        "comm_busbw_link_frac": wait.link_frac,
        "comm_size_r": wait.size_r,
        "comm_dtype": comm.dtype,
        "comm_wait_verdict": wait.verdict,
        "comm_wait_reason": wait.reason,
        "comm_transfer_share": transfer,
        "gpu_comm_exposed_transfer_frac": (
            exposed_frac * transfer if exposed_frac is not None and transfer is not None else None
        ),
    }
