"""Communication kernels by more than one spelling (issue 32): the DeepEP family under a
fork's own namespace, NVSHMEM/IBGDA symbols, and any kernel launched from inside a
collective's host call; and kernels merely named "dispatch" outside such a scope stay
compute."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze.trace import load_trace
from perfdoctor.diagnose_traces import diagnose_traces
from perfdoctor.render import summary

from .comm_traces import H100, collective_trace
from .synthetic_trace import write_trace

# The MoE trace's kernels, renamed by the fork (`deep_ep::` -> `dpsk::ep::`).
DPSK = [
    "void dpsk::ep::internode::notify_dispatch<8>(int const*, int*, int)",
    "void dpsk::ep::internode::dispatch<false, 8, 128>(int4*, float*, int*)",
    "void dpsk::ep::internode::cached_notify(int, int, void**)",
    "void dpsk::ep::internode::combine<nv_bfloat16, 8>(int4*, float*)",
]


@pytest.mark.parametrize("name", DPSK)
def test_deepep_under_another_namespace_is_all_to_all(name: str) -> None:
    assert coll.kernel_family(name) == "deepep"
    assert coll.collective_kind(name) == coll.ALL_TO_ALL


@pytest.mark.parametrize(
    "name",
    [
        "void nvshmemi_proxy_progress_kernel()",
        "nvshmemx_barrier_all_on_stream_kernel",
        "void ibgda_poll_cq(nvshmemi_ibgda_device_cq_t*)",
    ],
)
def test_nvshmem_and_ibgda_symbols_are_communication(name: str) -> None:
    assert coll.kernel_family(name) == "nvshmem"


@pytest.mark.parametrize(
    "name",
    [
        # MoE token-dispatch permutes: compute, named "dispatch" in a compute scope.
        "void moe::dispatch_kernel<__nv_bfloat16, 8>(__nv_bfloat16 const*, int const*)",
        "void vllm::moe::token_dispatch_permute<float>(float*)",
        "void at::native::dispatch_combine_scatter<float>(float*)",
        "void sglang::ep_moe_dispatch_permute(int*)",
    ],
)
def test_a_dispatch_kernel_outside_a_comm_scope_is_compute(name: str) -> None:
    assert coll.kernel_family(name) is None


def _moe_trace(names: list[str], host: str | None = None) -> dict:
    # Per kernel: a 460 µs exchange after 530 µs of GEMM, not overlapped: the MoE trace's
    # 46.5% of kernel time in the exchange, all of it exposed.
    kernels = [{"name": n, "dur": 460.0, **({"host": host} if host else {})} for n in names]
    return collective_trace(kernels, device=H100, compute_us=530.0)


def test_renamed_deepep_is_communication_and_leads_the_headline(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "moe.pt.trace.json", _moe_trace(DPSK))
    trace = load_trace(path)
    assert trace.gpu is not None and trace.comm is not None
    assert trace.gpu.comm_kernel_frac == pytest.approx(460 / 990, rel=1e-6)
    assert trace.comm.families == ("deepep",)
    assert trace.comm.parallelism == "expert_parallel"
    (done,) = diagnose_traces([path], tmp_path / "out")
    assert done.report is not None
    head = summary.headline(done.report)
    assert "communication" in head.slow.lower(), head
    assert "torch.compile" not in head.fix, head


def test_an_unknown_kernel_launched_inside_a_collective_call_is_communication(
    tmp_path: Path,
) -> None:
    """A kernel no name list knows, put on its stream by c10d's all_to_all: communication."""
    names = ["void acme::xfer::pull_tokens<8>(int4*)"] * 3
    trace = load_trace(write_trace(tmp_path / "t.json", _moe_trace(names, "c10d::alltoall_")))
    assert trace.comm is not None and trace.comm.dominant == coll.ALL_TO_ALL
    assert trace.comm.families == ("launched_in_collective",)
    assert trace.gpu.comm_kernel_frac == pytest.approx(460 / 990, rel=1e-6)
    assert all(k.comm for k in trace.gpu.top_kernels if "pull_tokens" in k.name)


def test_a_kernel_launched_in_a_user_all2all_span_stays_compute(tmp_path: Path) -> None:
    """TorchRec's `All2All_Pooled_Wait` spans launch permutes and copies around the
    exchange: a span named for an all-to-all is not a collective's host call."""
    names = ["void fbgemm_gpu::permute_2D_data_kernel<int>(int*)"] * 3
    trace = load_trace(write_trace(tmp_path / "t.json", _moe_trace(names, "All2All_Pooled_Wait")))
    assert trace.comm is None
    assert trace.gpu.comm_kernel_frac == 0.0
