"""The nccl-tests bus-bandwidth arithmetic and the link table."""

from __future__ import annotations

import pytest

from perfdoctor.analyze import collectives as coll
from perfdoctor.analyze.comm_bandwidth import (
    algbw_gbs,
    bus_factor,
    busbw_gbs,
    dtype_bytes,
    link_for,
    message_bytes,
)


@pytest.mark.parametrize(
    ("kind", "ranks", "factor"),
    [
        (coll.ALL_REDUCE, 8, 2 * 7 / 8),
        (coll.ALL_REDUCE, 2, 1.0),
        (coll.ALL_GATHER, 8, 7 / 8),
        (coll.REDUCE_SCATTER, 4, 3 / 4),
        (coll.ALL_TO_ALL, 8, 7 / 8),
        (coll.BROADCAST, 8, 1.0),
        (coll.SEND_RECV, 2, 1.0),
        (coll.ALL_REDUCE, 1, 0.0),
    ],
)
def test_bus_factor_is_nccl_tests(kind: str, ranks: int, factor: float) -> None:
    assert bus_factor(kind, ranks) == pytest.approx(factor)


def test_bus_factor_needs_a_rank() -> None:
    with pytest.raises(ValueError):
        bus_factor(coll.ALL_REDUCE, 0)


def test_busbw_of_an_all_reduce() -> None:
    # 256 MiB of fp32 all-reduced over 8 ranks in 2 ms: algbw 134.2 GB/s, busbw x 1.75.
    size = message_bytes(coll.ALL_REDUCE, 64 * 2**20, 64 * 2**20, "Float")
    assert size == 256 * 2**20
    assert algbw_gbs(size, 2000.0) == pytest.approx(size / 2e-3 / 1e9)
    assert busbw_gbs(coll.ALL_REDUCE, size, 2000.0, 8) == pytest.approx(size / 2e-3 / 1e9 * 1.75)


def test_message_size_follows_nccl_tests() -> None:
    # all-gather: the gathered output; reduce-scatter: the unreduced input.
    assert message_bytes(coll.ALL_GATHER, 100, 800, "BFloat16") == 1600
    assert message_bytes(coll.REDUCE_SCATTER, 800, 100, "BFloat16") == 1600
    assert message_bytes(coll.ALL_TO_ALL, 100, 100, "Float8_e4m3fn") == 100
    assert message_bytes(coll.ALL_REDUCE, 100, 100, "Mystery") is None
    assert message_bytes(coll.ALL_REDUCE, None, None, "Float") is None


def test_dtype_widths() -> None:
    assert dtype_bytes("Float") == 4
    assert dtype_bytes("Half") == 2
    assert dtype_bytes("Long") == 8
    assert dtype_bytes(None) is None


@pytest.mark.parametrize(
    ("device", "group", "gbs"),
    [
        ("Tesla V100-SXM2-32GB", 8, 150.0),
        ("NVIDIA A100-SXM4-80GB", 8, 300.0),
        ("NVIDIA A100-PG509-200", 2, 300.0),
        ("NVIDIA A100 80GB PCIe", 2, 32.0),
        ("NVIDIA H100 80GB HBM3", 8, 450.0),
        ("NVIDIA H100 PCIe", 2, 64.0),
        ("NVIDIA H800", 8, 200.0),
        ("NVIDIA B200", 8, 900.0),
        ("AMD Instinct MI300X", 8, 448.0),
    ],
)
def test_link_by_device(device: str, group: int, gbs: float) -> None:
    link = link_for(device, group)
    assert link is not None and link.gbs == gbs and link.source


def test_no_link_across_nodes_or_for_unknown_devices() -> None:
    assert link_for("NVIDIA H100 80GB HBM3", 16) is None  # crosses nodes: the NIC decides
    assert link_for("Some Accelerator", 8) is None
    assert link_for(None, 8) is None
