"""A rank's collectives from its trace, family by family: counted as communication, typed,
sized, and judged transfer or waiting; the facts and the communication rule that follow."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze.comm_wait import TRANSFER, UNKNOWN, WAITING
from perfdoctor.analyze.trace import load_trace
from perfdoctor.analyze.trace_events import parse_trace
from perfdoctor.analyze.trace_host import comm_time
from perfdoctor.analyze.trace_index import find_steps
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render.gpu_view import collective_rows
from perfdoctor.render.markdown import render_markdown

from .comm_traces import H100, collective_trace, sized
from .gpu_corpus import REPO
from .synthetic_trace import write_trace

MIB = 1 << 20


def _summary(tmp_path: Path, trace: dict) -> object:
    return load_trace(write_trace(tmp_path / "rank0.pt.trace.json", trace))


def test_deepep_all_to_all_is_communication_not_compute(tmp_path: Path) -> None:
    """The MoE trace of issue 22: DeepEP dispatch/combine took 46.5% of kernel time and was
    counted as compute."""
    kernels = [
        {"name": "void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", "dur": 400.0},
        {"name": "void deep_ep::intranode::combine<nv_bfloat16, 8>(int4*)", "dur": 400.0},
    ]
    summary = _summary(tmp_path, collective_trace(kernels, device=H100))
    gpu, comm = summary.gpu, summary.comm
    assert gpu is not None and comm is not None
    assert gpu.comm_kernel_frac == pytest.approx(800 / 1000)
    assert gpu.compute_frac is not None and gpu.comm_frac is not None
    assert comm.families == ("deepep",)
    assert comm.dominant == coll.ALL_TO_ALL
    assert comm.parallelism == "expert_parallel"


def test_symmetric_memory_all_reduce_is_communication(tmp_path: Path) -> None:
    kernels = [{"name": "void c10d::symmetric_memory::multimem_all_reduce_kernel<float>()",
                "dur": 300.0}] * 3  # fmt: skip
    summary = _summary(tmp_path, collective_trace(kernels, device=H100))
    assert summary.comm is not None and summary.comm.families == ("symmetric_memory",)
    assert summary.comm.dominant == coll.ALL_REDUCE
    assert summary.comm.parallelism == "tensor_parallel"
    assert summary.gpu.comm_kernel_frac == pytest.approx(900 / 1200)


def test_sendrecv_kernels_under_an_all_to_all_span_are_all_to_all(tmp_path: Path) -> None:
    """DLRM: NCCL runs the all-to-all as SendRecv kernels; nccl:all_to_all says what it is."""
    sendrecv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long)"
    kernels = [
        {"name": sendrecv, "dur": 500.0, "host": "nccl:all_to_all"},
        {"name": sendrecv, "dur": 500.0, "host": "nccl:all_to_all"},
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "dur": 200.0,
         "host": "nccl:all_reduce"},
        {"name": sendrecv, "dur": 100.0, "host": "nccl:send 0->1"},
    ]  # fmt: skip
    comm = _summary(tmp_path, collective_trace(kernels)).comm
    shares = {k.kind: k.count for k in comm.kinds}
    assert shares == {coll.ALL_TO_ALL: 2, coll.ALL_REDUCE: 1, coll.SEND_RECV: 1}
    assert comm.parallelism == "all_to_all"
    assert [k for k, _ in comm.sequence] == [
        coll.ALL_TO_ALL, coll.ALL_TO_ALL, coll.ALL_REDUCE, coll.SEND_RECV
    ]  # fmt: skip
    assert all(k.wait.verdict == UNKNOWN for k in comm.kinds)  # no sizes recorded


def _sized_all_reduces(durs: list[float], sizes: list[int], on_kernel: bool) -> dict:
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    kernels = []
    for dur, n in zip(durs, sizes, strict=True):
        args = sized("allreduce", n // 4, group=8)
        if on_kernel:
            kernels.append({"name": name, "dur": dur, "args": args})
        else:
            kernels.append({"name": name, "dur": dur, "host": "nccl:all_reduce", "host_args": args})
    return collective_trace(kernels, device=H100, compute_us=50.0)


@pytest.mark.parametrize("on_kernel", [True, False])
def test_flat_durations_over_sizes_are_waiting_and_only_transfer_is_promised(
    tmp_path: Path, on_kernel: bool
) -> None:
    """Sizes from the kernel's own args (torch >= 2.2) or from record_param_comms around
    the launch (torch 2.1): all-reduces from 2 to 256 MiB all lasting ~4 ms are waiting."""
    sizes = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 256 * MIB]
    durs = [4000.0, 4050.0, 3980.0, 4020.0, 4010.0]
    summary = _summary(tmp_path, _sized_all_reduces(durs, sizes, on_kernel))
    stats = summary.comm.kinds[0]
    assert stats.kind == coll.ALL_REDUCE and stats.sized == 5
    assert stats.wait.verdict == WAITING
    assert summary.comm.link is not None and summary.comm.link.gbs == 450.0
    assert summary.comm.transfer_frac is not None and summary.comm.transfer_frac < 0.5


def test_the_rule_promises_the_transfer_part_and_names_the_wait(tmp_path: Path) -> None:
    sizes = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 256 * MIB]
    durs = [4000.0, 4050.0, 3980.0, 4020.0, 4010.0]
    path = write_trace(
        tmp_path / "t" / "rank0.pt.trace.json", _sized_all_reduces(durs, sizes, True)
    )
    (done,) = diagnose_traces([path], out_dir=tmp_path / "out")
    report = done.report
    assert report is not None
    facts = report.facts
    assert facts["comm_wait_verdict"] == WAITING
    assert facts["comm_dominant_collective"] == coll.ALL_REDUCE
    finding = next(f for f in report.findings if f.rule_id == "communication-heavy")
    exposed = facts["gpu_comm_exposed_frac"]
    assert finding.gain.step_time_frac == pytest.approx(
        exposed * facts["comm_transfer_share"], abs=1e-3
    )
    assert finding.gain.step_time_frac < 0.5 * exposed
    assert "waiting for a peer" in finding.explanation
    assert "mostly waiting for a peer" in finding.title
    # One fix carries the estimate: accumulation and a larger batch cut the same all-reduces.
    assert finding.optimizations == ("grad-accumulation",)
    # The report's collectives table: the same collective, its sizes, busbw and verdict.
    (row,) = report.gpu["collectives"]
    assert row["kind"] == coll.ALL_REDUCE and row["count"] == 5 and row["sized"] == 5
    assert row["bytes_mean"] == pytest.approx(sum(sizes) / 5)
    assert row["verdict"] == WAITING and row["link_gbs"] == 450.0
    # busbw of the median-size all-reduce (32 MiB in ~4 ms), 2(n-1)/n for its group of 8
    assert row["busbw_gbs_p50"] == pytest.approx(32 * MIB / 3980e-6 * 1.75 / 1e9, rel=0.02)
    (cells,) = collective_rows(report)
    assert cells[0] == "all-reduce" and cells[-1] == "waiting"
    assert cells[4] == "85.2 MiB mean" and "of NVLink" in cells[5]
    markdown = render_markdown(report)
    assert "### Collectives" in markdown and "| all-reduce | 5 |" in markdown


def test_durations_that_follow_size_are_transfer(tmp_path: Path) -> None:
    sizes = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 256 * MIB]
    # busbw = size x 1.75 / t at 350 GB/s (78% of the H100's 450) plus 15 µs of latency.
    durs = [15.0 + s * 1.75 / 350e9 * 1e6 for s in sizes]
    summary = _summary(tmp_path, _sized_all_reduces(durs, sizes, True))
    assert summary.comm.kinds[0].wait.verdict == TRANSFER
    assert summary.comm.transfer_frac == pytest.approx(1.0)


def test_unsized_collectives_of_one_rank_promise_half(tmp_path: Path) -> None:
    """One rank without message sizes cannot split transfer from waiting: it never promises
    the whole exposed share, and says what would resolve it."""
    kernels = [{"name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                "dur": 2000.0, "host": "nccl:all_reduce"}] * 4  # fmt: skip
    path = write_trace(tmp_path / "t" / "rank0.pt.trace.json", collective_trace(kernels))
    (done,) = diagnose_traces([path], out_dir=tmp_path / "out")
    finding = next(f for f in done.report.findings if f.rule_id == "communication-heavy")
    exposed = done.report.facts["gpu_comm_exposed_frac"]
    assert finding.gain.step_time_frac == pytest.approx(exposed * 0.5, abs=1e-3)
    assert "other ranks' traces" in finding.explanation


def test_gloo_and_functional_collectives_count_as_host_communication(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "ts": 100, "dur": 200,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "_c10d_functional::all_gather_into_tensor",
         "ts": 400, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "_c10d_functional::wait_tensor", "ts": 600,
         "dur": 100, "pid": 1, "tid": 1},
    ]  # fmt: skip
    ev = parse_trace(write_trace(tmp_path / "cpu.json", {"traceEvents": events}))
    assert comm_time(ev, find_steps(ev)) == pytest.approx(300.0)


def test_b200_serving_trace_multimem_all_reduce_is_tensor_parallel_communication() -> None:
    """TraceLens's vLLM B200 trace (AMD-AGI/TraceLens tests/traces/b200/eager_trace.json.gz,
    MIT, at 171dd747; outside the repository): 73 symmetric-memory all-reduces, whose name
    starts with the `(anonymous namespace)` scope."""
    root = Path(os.environ.get("PERFDOCTOR_EXTRA_CORPUS") or REPO.parent / "extra-corpus")
    path = root / "tracelens_b200_eager_trace.json.gz"
    if not path.is_file():
        pytest.skip("the extra corpus (TraceLens B200 trace) is absent")
    comm = load_trace(path).comm
    assert comm is not None
    assert comm.families == ("nccl", "symmetric_memory")
    top = comm.kinds[0]
    assert (top.kind, top.count) == (coll.ALL_REDUCE, 73)
    assert comm.parallelism == "tensor_parallel"
    assert comm.link is not None and comm.link.gbs == 900.0


def test_nccl_names_on_an_amd_device_are_rccl(tmp_path: Path) -> None:
    mi300 = {"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}
    kernels = [{"name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "dur": 500.0,
                "host": "nccl:all_reduce"}] * 2  # fmt: skip
    comm = _summary(tmp_path, collective_trace(kernels, device=mi300)).comm
    assert comm.families == ("rccl",)
    assert comm.dominant == coll.ALL_REDUCE
    assert comm.link is not None and comm.link.gbs == 448.0
