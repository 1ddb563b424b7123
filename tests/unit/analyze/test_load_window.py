"""A timed window between two CPU-sampler ticks still gets the machine's load (the run's)."""

from __future__ import annotations

from perfdoctor.analyze.load_window import with_run_load
from perfdoctor.analyze.samples import summarize_samples
from perfdoctor.run_schema import CpuSample


def _cpu(t: float, machine: float, child: float) -> CpuSample:
    # 2 cores: `machine` percent on each, the child `child` percent of one core in all.
    return CpuSample(t=t, cpu_percent=[machine, machine], child_cpu_percent=child)


SAMPLES = [_cpu(0.1, 90.0, 20.0), _cpu(0.2, 90.0, 20.0), _cpu(0.3, 90.0, 20.0)]


def test_a_window_without_a_sample_takes_the_runs_load() -> None:
    window = (0.21, 0.25)  # 20 steps of 2 ms: no tick inside
    summary = summarize_samples(SAMPLES, window, 20)
    assert summary.cpu_samples == 0 and summary.other_busy_cores is None
    filled = with_run_load(summary, SAMPLES)
    assert filled.other_busy_cores is not None
    assert abs(filled.other_busy_cores - 1.6) < 1e-9  # 1.8 cores busy, 0.2 of them the run's


def test_a_window_with_samples_keeps_its_own() -> None:
    samples = [*SAMPLES, _cpu(0.22, 50.0, 20.0)]
    summary = summarize_samples(samples, (0.21, 0.25), 20)
    assert with_run_load(summary, samples) is summary
    assert summary.other_busy_cores is not None and abs(summary.other_busy_cores - 0.8) < 1e-9
