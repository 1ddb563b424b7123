"""Host synchronizations inside the training step (.item(), .cpu(), print, synchronize)."""

from __future__ import annotations

from collections.abc import Mapping

from perfdoctor.model import Facts, Finding, GainEstimate
from perfdoctor.rules.base import Rule, ev, locations, num, pct, seen, severity_for_gain, where

HOST_SYNCS = "host-syncs"


def check_host_syncs(facts: Facts, t: Mapping[str, float]) -> Finding | None:
    syncs = num(facts, "host_syncs_per_step")
    sync_ms = num(facts, "host_sync_ms_per_step")
    step_ms = num(facts, "step_ms_p50")
    if syncs is None or sync_ms is None or not step_ms or syncs < t["min_syncs_per_step"]:
        return None
    blocked = min(1.0, sync_ms / step_ms)
    # A sync costs only where it lets the GPU run dry: cap by the GPU's idle share, or, when
    # the trace shows it, by the idle time that followed a sync that drained the queue.
    busy = num(facts, "gpu_busy_frac")
    drained = num(facts, "gpu_idle_host_sync_frac")
    gain = blocked if busy is None else min(blocked, max(0.0, 1.0 - busy))
    if drained is not None:
        gain = min(gain, drained)
        if drained < t["min_blocked_frac"]:
            return None  # the CPU waited, but the GPU had work queued: nothing lost
    if blocked < t["min_blocked_frac"]:
        return None
    locs = locations(facts, "host_sync")
    return Finding(
        rule_id=HOST_SYNCS,
        severity=severity_for_gain(gain),
        title=f"{syncs:g} host syncs per step block the CPU {pct(blocked)} of the step",
        explanation=(
            f"The step forces the CPU to wait for the GPU {syncs:g} times ({sync_ms:.2f} ms, "
            f"{pct(blocked)} of the step): .item(), .cpu(), printing a tensor, bool() on a "
            "tensor or torch.cuda.synchronize(). While the CPU waits it queues no work, so the "
            "GPU idles once it catches up. Keep metrics on the device and read them every N "
            f"steps.{where(locs)}"
        ),
        evidence=(
            ev("host_syncs_per_step", syncs, t["min_syncs_per_step"], ">="),
            ev(
                "host_sync_ms_per_step",
                sync_ms,
                unit=" ms",
                note=f"{pct(blocked)} of step_ms_p50 (min {pct(t['min_blocked_frac'])})",
            ),
            *seen(facts, "gpu_idle_host_sync_frac", "gpu_busy_frac"),
        ),
        locations=locs,
        gain=GainEstimate(
            step_time_frac=gain,
            method="time blocked in syncs, at most the GPU's idle share of the step",
        ),
    )


RULES = (
    Rule(
        id=HOST_SYNCS,
        title="Host synchronizations in the step",
        area="sync",
        needs=("device_is_cuda", "host_syncs_per_step", "host_sync_ms_per_step", "step_ms_p50"),
        uses=("gpu_busy_frac", "gpu_idle_host_sync_frac"),
        thresholds={"min_syncs_per_step": 1.0, "min_blocked_frac": 0.02},
        source=(
            "nsys analyze cuda_api_sync (any cudaDeviceSynchronize/cudaStreamSynchronize) and "
            "HTA critical_path_analysis sync edges; perfdoctor needs >= 1 per step blocking "
            ">= 2% of the step (choice here, so an occasional logging .item() does not warn)"
        ),
        description=(
            "item/_local_scalar_dense/synchronize calls per step with the user's lines; the "
            "gain is capped by the GPU idle share because syncs only cost when the GPU drains; "
            "with a trace, by the GPU idle time after syncs (none: no finding)."
        ),
        check=check_host_syncs,
        device="cuda",
        topics=("host_sync",),
        optimizations=("remove-host-syncs",),
    ),
)
