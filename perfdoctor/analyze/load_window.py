"""Other processes' load when the timed window holds no CPU sample.

The CPU sampler ticks every ~100 ms; a script whose timed steps take a few milliseconds in all
(a 4-weight regression, 20 steps) ends its window between two ticks, and the machine's load
would be unknown exactly where the rules need it (rules/machine_load.py, busy-machine, the
jitter rule's cause). The nearest measurement is then the whole run's: other processes' cores
are counted apart from the run's own, so the child's start-up does not inflate them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfdoctor.analyze.samples import SamplesSummary, summarize_samples
from perfdoctor.run_schema import SampleRow


def with_run_load(summary: SamplesSummary, samples: Sequence[SampleRow]) -> SamplesSummary:
    """`summary` with the run's other_busy_cores where its own window had no CPU sample."""
    if summary.other_busy_cores is not None or summary.cpu_samples:
        return summary
    whole = summarize_samples(samples, None, 0)
    if whole.other_busy_cores is None:
        return summary
    return replace(summary, other_busy_cores=whole.other_busy_cores)
