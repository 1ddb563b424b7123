"""Several ranks of one job: the rank the others wait for, from their collectives matched
across the traces, and one diagnosis for the job (on that rank's trace)."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from perfdoctor.analyze.job_ranks import job_waits
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render.summary import headline

from .comm_traces import collective_trace
from .gpu_corpus import corpus_dir
from .synthetic_trace import write_trace

A2A, AR = "all_to_all", "all_reduce"


def test_the_rank_with_the_shortest_collectives_arrived_last() -> None:
    seqs = {
        0: [(A2A, 900.0), (AR, 500.0), (A2A, 800.0)],
        1: [(A2A, 950.0), (AR, 520.0), (A2A, 700.0)],
        2: [(A2A, 10.0), (AR, 30.0), (A2A, 12.0)],  # arrives last: waits for nobody
    }
    job = job_waits(seqs)
    assert job is not None
    assert job.late_rank == 2 and job.matched == 3
    assert job.last_arrivals == {0: 0, 1: 0, 2: 3}
    assert job.wait_ms[2] == 0.0
    assert job.wait_ms[0] == pytest.approx((890 + 470 + 788) / 1000)
    assert job.held_ms == pytest.approx(
        sorted([(890 + 470 + 788) / 1000, (940 + 490 + 688) / 1000])[0] / 2
        + sorted([(890 + 470 + 788) / 1000, (940 + 490 + 688) / 1000])[1] / 2
    )


def test_collectives_are_matched_by_type_and_order() -> None:
    """Rank 1 ran an extra all-gather: only the types every rank ran are matched."""
    seqs = {
        0: [(AR, 100.0), (AR, 900.0)],
        1: [("all_gather", 50.0), (AR, 800.0), (AR, 10.0)],
    }
    job = job_waits(seqs)
    assert job is not None and job.kinds == (AR,) and job.matched == 2
    assert job.last_arrivals == {0: 1, 1: 1}
    assert job.late_rank == 1  # it made rank 0 wait 890 µs; rank 0 made it wait 700


def test_no_late_rank_without_enough_matched_collectives() -> None:
    assert job_waits({0: [(AR, 1.0)], 1: [(AR, 2.0)]}) is None
    assert job_waits({0: [(AR, 1.0), (AR, 2.0)]}) is None


def _rank_trace(rank: int, late: bool) -> dict:
    name = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)"
    kernels = [
        {"name": name, "dur": 20.0 if late else 3000.0, "host": "nccl:all_to_all"},
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
         "dur": 40.0 if late else 2500.0, "host": "nccl:all_reduce"},
        {"name": name, "dur": 25.0 if late else 2000.0, "host": "nccl:all_to_all"},
    ]  # fmt: skip
    # The late rank computes longer: what the others wait for.
    return collective_trace(kernels, rank=rank, world_size=4, compute_us=2600 if late else 100)


def test_one_job_gets_one_cause_on_the_late_rank(tmp_path: Path) -> None:
    paths = [
        write_trace(tmp_path / "job" / f"rank{r}.pt.trace.json", _rank_trace(r, late=r == 2))
        for r in range(4)
    ]
    (done,) = diagnose_traces(paths, out_dir=tmp_path / "out")
    report = done.report
    assert report is not None
    assert report.facts["job_late_rank"] == 2
    assert report.ranks[0].rank == 2  # the report is rank 2's trace
    straggler = next(f for f in report.findings if f.rule_id == "rank-straggler")
    assert straggler.title.startswith("Rank 2 ")
    assert "arrives last" in straggler.explanation
    assert any("rank 2 arrives last at 3 of 3" in w for w in report.warnings)
    # The late rank waits for nobody: its communication is no wait for a peer.
    assert report.facts["comm_peer_wait_frac"] in (None, 0.0) or (
        report.facts["comm_peer_wait_frac"] < 0.05
    )


def _dlrm() -> list[Path]:
    root = corpus_dir()
    if root is None:
        return []
    return [Path(p) for p in sorted(glob.glob(str(root / "traces" / "param_dlrm_worker*")))]


@pytest.mark.skipif(len(_dlrm()) != 8, reason="the shared GPU corpus (DLRM ranks) is absent")
def test_dlrm_eight_ranks_get_one_root_cause_naming_rank_7(tmp_path: Path) -> None:
    """The 8 DLRM ranks of issue 22, diagnosed one at a time, read two "communication-heavy"
    and six "launch-bound". Rank 7's all-to-all kernels last 7-10 µs where the others' last
    0.5-7.6 ms: it arrives last, and the others wait for it."""
    (done,) = diagnose_traces(_dlrm(), out_dir=tmp_path / "out")
    report = done.report
    assert report is not None
    facts = report.facts
    assert facts["job_late_rank"] == 7
    assert facts["job_collectives_matched"] == 8
    assert facts["straggler_rank"] == 7
    assert report.findings[0].rule_id != "communication-heavy"
    assert any(f.rule_id == "rank-straggler" for f in report.findings)
    slow = headline(report).slow
    assert slow.startswith("Rank 7 holds the job up")
    assert facts["comm_parallelism"] in ("all_to_all", "data_parallel")


def test_ranks_traced_over_different_steps_are_not_matched(tmp_path: Path) -> None:
    """Each rank's profiler window covered other steps: matching their collectives by order
    would compare different collectives."""
    paths = []
    for r in range(2):
        trace = _rank_trace(r, late=r == 1)
        for e in trace["traceEvents"]:
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{10 + 5 * r}"
        paths.append(write_trace(tmp_path / "job" / f"rank{r}.pt.trace.json", trace))
    (done,) = diagnose_traces(paths, out_dir=tmp_path / "out")
    assert done.report is not None
    assert done.report.facts["job_late_rank"] is None
