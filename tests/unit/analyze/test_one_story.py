"""One report, one story (issue 32): an MI300X DDP trace whose exposed communication leads
got "the kernels themselves set the pace -> torch.compile" beside it, bf16 compression for
all-reduces already in bf16, "mostly waiting" for durations that follow the message size
(r = 0.99), and vocabulary padding for a ResNet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfdoctor.analyze.comm_wait import TRANSFER, Sample, classify
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.model import Report

from .comm_traces import collective_trace, sized
from .gemm_trace import gemm_trace
from .synthetic_trace import write_trace

MI300X = {"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}
MIB = 1 << 20
ALL_REDUCE = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"


def _ddp_report(tmp_path: Path, dtype: str) -> Report:
    # Gradient buckets from 2 to 200 MiB, each all-reduce lasting its bytes at 20 GB/s of
    # bus bandwidth (4% of the 448 GB/s link): transfer at a slow link, exposed.
    kernels = []
    for mib in (2, 5, 10, 25, 50, 100, 200):
        nbytes = mib * MIB
        dur = nbytes * 1.75 / 20e9 * 1e6
        kernels.append(
            {"name": ALL_REDUCE, "dur": dur, "host": "nccl:all_reduce",
             "args": sized("allreduce", nbytes // 2, group=8, dtype=dtype)}
        )  # fmt: skip
    trace = collective_trace(kernels, device=MI300X, compute_us=2000.0)
    path = write_trace(tmp_path / "rank0.pt.trace.json", trace)
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    return done.report


def test_exposed_communication_that_follows_size_is_transfer_and_leads_alone(
    tmp_path: Path,
) -> None:
    report = _ddp_report(tmp_path, "BFloat16")
    facts = report.facts
    assert facts["gpu_busy_frac"] > 0.85 and facts["gpu_comm_exposed_frac"] > 0.5
    assert facts["comm_wait_verdict"] == TRANSFER
    assert facts["comm_size_r"] > 0.99
    ids = [f.rule_id for f in report.findings]
    assert ids[0] == "communication-heavy", ids
    assert "gpu-bound" not in ids  # busy with communication is not kernels setting the pace
    head = report.findings[0]
    assert "waiting" not in head.title
    assert "compression" not in head.explanation  # the all-reduces are bf16 already


def test_fp32_all_reduces_get_the_compression_hook(tmp_path: Path) -> None:
    head = _ddp_report(tmp_path, "Float").findings[0]
    assert head.rule_id == "communication-heavy"
    assert "fp32: a DDP comm hook (bf16 compression)" in head.explanation


def test_flat_durations_are_still_waiting_and_following_ones_transfer_at_any_link() -> None:
    sizes = [2 * MIB * 2**i for i in range(6)]
    follow = [Sample(s * 1.75 / 20e9 * 1e6, float(s), 1.75) for s in sizes]
    assert classify(follow, 448.0).verdict == TRANSFER
    durs = [4000.0, 4030.0, 3990.0, 4010.0, 3980.0, 4020.0]
    flat = [Sample(d, float(s), 1.75) for d, s in zip(durs, sizes, strict=True)]
    assert classify(flat, 448.0).verdict == "waiting"


# A ResNet's classifier on a batch of 100: 100 is not a multiple of 8.
BF16_FC = ("aten::addmm", [[1000], [100, 2048], [2048, 1000]], ["c10::BFloat16"] * 3,
           "Cijk_Alik_Bljk_BBS_BH_MT128x128x32", 200.0)  # fmt: skip


@pytest.mark.parametrize(
    ("embedding", "expected"),
    [
        (None, "pad-gemm-dims"),  # a ResNet: no embedding, no vocabulary
        ([50257, 768], "pad-vocab"),  # GPT-2's vocabulary
        ([50304, 768], "pad-gemm-dims"),  # already a multiple of 64
    ],
)
def test_vocabulary_padding_only_with_an_unaligned_embedding(
    tmp_path: Path, embedding: list[int] | None, expected: str
) -> None:
    ops = [BF16_FC]
    if embedding is not None:
        ops.insert(0, ("aten::embedding", [embedding, [8, 1024]], ["c10::BFloat16", "long"],
                       "void at::native::indexSelectLargeIndex<c10::BFloat16>", 50.0))  # fmt: skip
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(gemm_trace(ops, device=MI300X)))
    (done,) = diagnose_traces([path], tmp_path / "out")
    (finding,) = [f for f in done.report.findings if f.rule_id == "misaligned-lowp-gemm"]
    assert finding.optimizations == (expected,)
    assert ("vocabulary" in finding.explanation) == (expected == "pad-vocab")
    assert "dims 100)" in finding.explanation
