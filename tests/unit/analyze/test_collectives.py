"""Communication kernels and ops by what they are: the library, and the collective."""

from __future__ import annotations

import pytest

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze.kernels import is_comm_kernel


@pytest.mark.parametrize(
    ("name", "family", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
         "nccl", coll.ALL_REDUCE),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl",
         coll.ALL_GATHER),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage)", "nccl",
         coll.REDUCE_SCATTER),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
         "nccl", coll.SEND_RECV),
        ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)", "nccl", coll.BROADCAST),
        ("rcclGenericKernel<1, false>(ncclDevComm*)", "rccl", coll.OTHER),
        ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*, int*)", "deepep",
         coll.ALL_TO_ALL),
        ("void deep_ep::internode_ll::combine<false, 7168>(void*, int*, long*)", "deepep",
         coll.ALL_TO_ALL),
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16>(float*, ...)",
         "symmetric_memory", coll.ALL_REDUCE),
        ("void two_shot_all_reduce_kernel<c10::BFloat16, 8>(...)", "symmetric_memory",
         coll.ALL_REDUCE),
        # The B200 trace of TraceLens: the scope is in parentheses too.
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>"
         "(c10::BFloat16*, unsigned long, unsigned long)", "symmetric_memory", coll.ALL_REDUCE),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", "custom_all_reduce",
         coll.ALL_REDUCE),
    ],
)  # fmt: skip
def test_kernels_of_every_family_are_communication(name: str, family: str, kind: str) -> None:
    assert coll.kernel_family(name) == family
    assert is_comm_kernel(name)
    assert coll.collective_kind(name) == kind


@pytest.mark.parametrize(
    "name",
    [
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
        "triton_red_fused_sum_0",
        "void cub::DeviceReduceByKeyKernel<...>",
        "void at::native::index_elementwise_kernel<128, 4>",
    ],
)
def test_compute_kernels_are_not(name: str) -> None:
    assert coll.kernel_family(name) is None
    assert not is_comm_kernel(name)


def test_the_recorded_collective_name_wins_over_the_kernel_name() -> None:
    """An NCCL all-to-all runs as SendRecv kernels: record_param_comms says what it is."""
    kernel = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)"
    assert coll.collective_kind(kernel, "all_to_allv") == coll.ALL_TO_ALL
    assert coll.collective_kind(kernel, "nccl:all_to_all") == coll.ALL_TO_ALL
    assert coll.collective_kind(kernel, "_allgather_base") == coll.ALL_GATHER
    assert coll.collective_kind(kernel, "reduce_scatter_tensor_coalesced") == (coll.REDUCE_SCATTER)
    assert coll.collective_kind(kernel, None) == coll.SEND_RECV


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nccl:all_reduce", True),
        ("gloo:all_reduce", True),
        ("c10d::allreduce_", True),
        ("_c10d_functional::all_gather_into_tensor", True),
        ("_c10d_functional::wait_tensor", False),
        ("record_param_comms", True),
        ("aten::add_", False),
    ],
)
def test_host_collective_ops(name: str, expected: bool) -> None:
    assert coll.is_comm_op(name) is expected


def test_host_backend() -> None:
    assert coll.host_backend("gloo:all_reduce") == "gloo"
    assert coll.host_backend("c10d::allreduce_") is None
