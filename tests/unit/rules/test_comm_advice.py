"""communication-heavy on GPU traces: the advice follows the collective and the
parallelism, and one rank promises only what its figures show of the transfer."""

from __future__ import annotations

import pytest

from perfdoctor.model import Finding, Scalar
from perfdoctor.rules import ALL_RULES, evaluate

from .factsets import make_facts

RULE = next(r for r in ALL_RULES if r.id == "communication-heavy")
EXPOSED = {"comm_frac": 0.01, "gpu_comm_frac": 0.4, "gpu_comm_exposed_frac": 0.3}


def _finding(**overrides: Scalar) -> Finding:
    results = evaluate(make_facts("gpu", **EXPOSED, **overrides), rules=(RULE,))
    assert len(results.findings) == 1, results
    return results.findings[0]


@pytest.mark.parametrize(
    ("parallelism", "words", "fixes"),
    [
        ("data_parallel", "gradient_as_bucket_view", ("grad-accumulation",)),
        ("fsdp", "reshard_after_forward", ()),
        ("expert_parallel", "capacity factor", ()),
        ("all_to_all", "TrainPipelineSparseDist", ()),
        ("pipeline", "micro-batches", ()),
        ("tensor_parallel", "CUDA_DEVICE_MAX_CONNECTIONS=1", ()),
        (None, "CUDA_DEVICE_MAX_CONNECTIONS=1", ("grad-accumulation",)),
    ],
)
def test_advice_follows_the_parallelism(
    parallelism: str | None, words: str, fixes: tuple[str, ...]
) -> None:
    finding = _finding(comm_parallelism=parallelism)
    assert words in finding.explanation
    assert finding.optimizations == fixes


def test_transfer_share_bounds_the_gain() -> None:
    finding = _finding(comm_transfer_share=0.25, comm_wait_verdict="waiting")
    assert finding.gain.step_time_frac == pytest.approx(0.3 * 0.25)
    assert "a straggler elsewhere" in finding.explanation


def test_the_late_rank_of_a_fully_traced_job_promises_all_of_its_exposed_time() -> None:
    finding = _finding(job_late_rank=3, ranks_untraced=0)
    assert finding.gain.step_time_frac == pytest.approx(0.3)
    assert "transfer, not waiting" in finding.explanation


def test_one_rank_without_sizes_promises_half() -> None:
    finding = _finding()
    assert finding.gain.step_time_frac == pytest.approx(0.15)
    assert "cannot split transfer from" in finding.gain.method
