"""The GPU-side step beside the host's, worded once for the GPU timeline section.

The host's ProfilerStep spans time how fast Python issued each step; when the host runs
ahead of the GPU (no syncs, CUDA graphs), the GPU's copies of those spans
(gpu_user_annotation, analyze/gpu_steps.py) time how long the GPU took. Shown only when the
two differ by more than DIFF_FRAC: otherwise the host's step is the step.
"""

from __future__ import annotations

from perfdoctor.model import Report
from perfdoctor.render import format as fmt

# Below this relative difference the two are the same step within profiler jitter.
DIFF_FRAC = 0.10


def gpu_step_text(report: Report) -> str:
    """'' when the GPU-side step is unknown or agrees with the host's."""
    gpu_ms = report.facts.get("gpu_step_ms_p50")
    count = report.facts.get("gpu_step_count")
    host_ms = report.facts.get("trace_step_ms_p50")
    if not isinstance(host_ms, (int, float)):
        host_ms = report.facts.get("step_ms_p50")
    if not isinstance(gpu_ms, (int, float)) or not isinstance(host_ms, (int, float)):
        return ""
    if not isinstance(count, int) or host_ms <= 0:
        return ""
    diff = (gpu_ms - host_ms) / host_ms
    # One copy spans only the step's first to last GPU op, not the idle time around it: it
    # says something only when it is longer than the host's step (the GPU lags).
    if abs(diff) <= DIFF_FRAC or (count < 2 and diff <= 0):
        return ""
    if diff > 0:
        return (
            f"GPU-side step {fmt.ms(gpu_ms)} against the host's {fmt.ms(host_ms)} (from the "
            "ProfilerStep copies on the GPU timeline): the host runs ahead and the GPU sets "
            "the pace"
        )
    return (
        f"GPU-side step {fmt.ms(gpu_ms)} against the host's {fmt.ms(host_ms)} (from the "
        "ProfilerStep copies on the GPU timeline): the GPU finishes each step's work sooner "
        "than the host issues it"
    )
