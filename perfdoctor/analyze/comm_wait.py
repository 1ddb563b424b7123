"""Transfer or waiting for a peer, per collective type, from one rank's collectives alone.

A collective kernel starts when its rank gets there and ends when the slowest rank of the
group has arrived and the data has moved, so its duration is transfer plus the wait for the
last peer. One rank's trace cannot see the peers, but two signatures tell waiting apart:

* durations flat in message size: a transfer's time grows with the bytes it moves, so
  over sizes spanning an order of magnitude, durations that do not follow them (a weak
  correlation) are dominated by something else: the peers arriving late;
* a bus bandwidth (nccl-tests' busbw) far below the link's: the bytes could have moved in a
  fraction of the time the kernel lasted.

Messages under MIN_FIT_BYTES are left out of both tests: their time is NCCL's latency
(several µs per hop), flat in size whatever the peers do.

The transfer part of a waiting collective is its bytes at the best bus bandwidth this rank
reached for that collective type (what its link demonstrably carries), or at LOW_LINK_FRAC
of the link if that is more; the rest is waiting. Of a transfer-bound collective, all of it
is transfer. Pure: works on plain numbers, the trace side is comm_trace.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TRANSFER = "transfer"
WAITING = "waiting"
UNKNOWN = "unknown"

# 1 MiB: below it NCCL's all-reduce is latency-bound (nccl-tests on 8 x A100 NVLink reach
# under half their peak busbw there), so size does not predict duration even without waits.
MIN_FIT_BYTES = 1 << 20
# At least this many sized collectives of a type to fit duration against size.
MIN_FIT_SAMPLES = 4
# The sizes must span an order of magnitude (max / min) for a flat duration to mean anything.
MIN_SIZE_SPAN = 10.0
# Pearson r of duration against bytes below this: the durations do not follow the sizes
# (a choice: a transfer-bound series on one link correlates above 0.9; half of that is
# well clear of noise on a few samples).
FLAT_R_MAX = 0.5
# Pearson r of duration against bytes at or above this, over sizes spanning MIN_SIZE_SPAN:
# the durations follow the sizes, which is what a transfer looks like, whatever the bus
# bandwidth against the link (an MI300X DDP trace at r = 0.99 was called "waiting" for its
# bandwidth alone: a slower or shared link than the table's, not a late peer).
FOLLOW_R_MIN = 0.9
# Median busbw below this share of the link's per-direction bandwidth: far below the link
# (a choice: nccl-tests reach most of the link from a few MiB on NVLink and PCIe; a fifth
# leaves room for protocol overheads and small rings).
LOW_LINK_FRAC = 0.2


@dataclass(frozen=True)
class Sample:
    """One collective kernel: its duration, and its size and bus factor where recorded."""

    dur_us: float
    size_bytes: float | None
    bus_factor: float | None


@dataclass(frozen=True)
class Verdict:
    verdict: str  # TRANSFER, WAITING or UNKNOWN
    reason: str
    size_r: float | None  # Pearson r of duration against bytes (sized samples >= MIN_FIT_BYTES)
    size_span: float | None  # largest / smallest of those sizes
    busbw_gbs_p50: float | None
    busbw_gbs_max: float | None
    link_frac: float | None  # busbw_gbs_p50 / the link's GB/s
    transfer_us: float | None  # of the samples' total time; None when UNKNOWN
    total_us: float


def _busbw(s: Sample) -> float | None:
    if s.size_bytes is None or s.bus_factor is None or s.dur_us <= 0:
        return None
    return s.size_bytes * s.bus_factor / (s.dur_us * 1e-6) / 1e9


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2 or float(np.std(x)) == 0.0:
        return None
    if float(np.std(y)) == 0.0:
        return 0.0  # constant durations across sizes: no correlation at all
    return float(np.corrcoef(x, y)[0, 1])


def classify(samples: Sequence[Sample], link_gbs: float | None) -> Verdict:
    """Transfer or waiting for one collective type's kernels on one rank."""
    total = float(sum(s.dur_us for s in samples))
    big = [s for s in samples if s.size_bytes is not None and s.size_bytes >= MIN_FIT_BYTES]
    bws = [b for b in (_busbw(s) for s in big) if b is not None]
    bw_p50 = float(np.median(bws)) if bws else None
    bw_max = max(bws) if bws else None
    link_frac = bw_p50 / link_gbs if bw_p50 is not None and link_gbs else None
    r = span = None
    if len(big) >= MIN_FIT_SAMPLES:
        sizes = np.array([s.size_bytes for s in big], dtype=float)
        durs = np.array([s.dur_us for s in big], dtype=float)
        span = float(sizes.max() / sizes.min())
        r = _pearson(sizes, durs)

    def verdict(kind: str, reason: str, transfer: float | None) -> Verdict:
        return Verdict(kind, reason, r, span, bw_p50, bw_max, link_frac, transfer, total)

    if r is not None and span is not None and span >= MIN_SIZE_SPAN and r < FLAT_R_MAX:
        return verdict(
            WAITING,
            f"durations flat in message size (r = {r:.2f} over sizes spanning {span:.0f}x)",
            _transfer_part(samples, bw_max),
        )
    follows = r is not None and span is not None and span >= MIN_SIZE_SPAN and r >= FOLLOW_R_MIN
    if follows and link_frac is not None and link_frac < LOW_LINK_FRAC:
        return verdict(
            TRANSFER,
            f"durations follow message size (r = {r:.2f} over sizes spanning {span:.0f}x): "
            f"transfer, at {bw_p50:.1f} GB/s, {link_frac:.0%} of the link assumed (a slower "
            "or shared link, not a late peer)",
            total,
        )
    if link_frac is not None and link_frac < LOW_LINK_FRAC:
        return verdict(
            WAITING,
            f"bus bandwidth {bw_p50:.1f} GB/s, {link_frac:.0%} of the link",
            # The bytes at the least the link should carry (or the best this rank reached,
            # if more): what is left is waiting, whatever the link really delivers.
            _transfer_part(samples, max(bw_max or 0.0, LOW_LINK_FRAC * (link_gbs or 0.0))),
        )
    if link_frac is not None:
        return verdict(
            TRANSFER, f"bus bandwidth {bw_p50:.1f} GB/s, {link_frac:.0%} of the link", total
        )
    if r is not None and span is not None and span >= MIN_SIZE_SPAN:
        return verdict(
            TRANSFER,
            f"durations follow message size (r = {r:.2f} over sizes spanning {span:.0f}x)",
            total,
        )
    if not any(s.size_bytes is not None for s in samples):
        return verdict(UNKNOWN, "the trace records no message sizes", None)
    return verdict(
        UNKNOWN, "too few large messages, or sizes too alike, to tell transfer from waiting", None
    )


def _transfer_part(samples: Sequence[Sample], rate_gbs: float | None) -> float | None:
    """Each waiting kernel's bytes at `rate_gbs` (at most its duration); a kernel without a
    size, or under MIN_FIT_BYTES, counts whole (latency, or nothing known)."""
    if not rate_gbs:
        return None
    out = 0.0
    for s in samples:
        if s.size_bytes is None or s.bus_factor is None or s.size_bytes < MIN_FIT_BYTES:
            out += s.dur_us
        else:
            out += min(s.dur_us, s.size_bytes * s.bus_factor / (rate_gbs * 1e9) * 1e6)
    return out
