"""Transfer or waiting for a peer, from one rank's collectives of one type."""

from __future__ import annotations

import pytest

from perfdoctor.analyze.comm_wait import (
    MIN_FIT_BYTES,
    TRANSFER,
    UNKNOWN,
    WAITING,
    Sample,
    classify,
)

MIB = float(1 << 20)


def _at_rate(sizes: list[float], gbs: float, latency_us: float = 20.0) -> list[Sample]:
    """All-reduces over 2 ranks (bus factor 1) moving at `gbs`: duration grows with size."""
    return [Sample(latency_us + s / (gbs * 1e9) * 1e6, s, 1.0) for s in sizes]


def test_durations_that_follow_size_are_transfer() -> None:
    sizes = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 256 * MIB]
    v = classify(_at_rate(sizes, 100.0), link_gbs=None)
    assert v.verdict == TRANSFER
    assert v.size_r is not None and v.size_r > 0.99
    assert v.transfer_us == pytest.approx(v.total_us)


def test_durations_flat_across_an_order_of_magnitude_are_waiting() -> None:
    sizes = [2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 256 * MIB]
    # Every kernel lasts about 5 ms whatever it moves: the peers arrive late.
    samples = [Sample(5000.0 + 10 * i * (-1) ** i, s, 1.0) for i, s in enumerate(sizes)]
    v = classify(samples, link_gbs=None)
    assert v.verdict == WAITING
    assert "flat in message size" in v.reason
    assert v.transfer_us is not None and v.transfer_us < 0.5 * v.total_us


def test_far_below_the_link_is_waiting_and_the_transfer_is_bounded() -> None:
    # 26 MB in 2.5 ms: 10 GB/s on a 300 GB/s link (3%).
    samples = [Sample(2500.0, 26e6, 1.0) for _ in range(5)]
    v = classify(samples, link_gbs=300.0)
    assert v.verdict == WAITING
    assert v.link_frac == pytest.approx(26e6 / 2.5e-3 / 1e9 / 300.0)
    # The bytes at a fifth of the link: 26 MB / 60 GB/s = 433 µs of each 2500.
    assert v.transfer_us == pytest.approx(5 * 26e6 / 60e9 * 1e6)


def test_near_the_link_is_transfer() -> None:
    samples = [Sample(300.0, 64 * MIB, 1.75) for _ in range(3)]
    v = classify(samples, link_gbs=450.0)
    assert v.verdict == TRANSFER
    assert v.busbw_gbs_p50 == pytest.approx(64 * MIB * 1.75 / 300e-6 / 1e9)


def test_no_sizes_no_verdict() -> None:
    v = classify([Sample(100.0, None, None)] * 5, link_gbs=150.0)
    assert v.verdict == UNKNOWN and v.transfer_us is None
    assert "no message sizes" in v.reason


def test_small_messages_are_latency_not_evidence() -> None:
    """Under MIN_FIT_BYTES the time is NCCL's latency, flat in size anyway."""
    sizes = [1024.0, 4096.0, 65536.0, 262144.0, MIN_FIT_BYTES / 2]
    v = classify([Sample(15.0, s, 1.0) for s in sizes], link_gbs=None)
    assert v.verdict == UNKNOWN
