"""Hand-built Reports for the renderer tests.

`cpu_report()` is shaped like a real CPU run of the image CNN sample (input-bound
DataLoader, threads below the cores, an evaluation pass without no_grad) with two measured
variants, one accepted and one rejected, and chart series for every chart. Every value is
fixed, so golden files built from it never change unless a renderer does.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from perfdoctor.model import (
    AppliedOptimization,
    BaselineSummary,
    DeviceInfo,
    Evidence,
    Finding,
    GainEstimate,
    LossTolerance,
    Recommendation,
    Report,
    SkippedRule,
    SourceLocation,
    VariantResult,
)

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)> | `x` *y* [z](http://evil) $a$'


def _steps(label: str, n: int, base_ms: float, loss0: float) -> dict[str, list[Any]]:
    warmup, profiled = 5, 3
    index = list(range(n))
    phase = [
        "warmup" if i < warmup else "profiled" if i >= n - profiled else "timed" for i in index
    ]
    # Deterministic "noise" so the charts look like measurements and goldens stay fixed.
    wall = [
        round(base_ms * (1.8 if i < 2 else 1.0) + 1.5 * math.sin(i * 1.7) + (i % 3) * 0.4, 3)
        for i in index
    ]
    wait = [round(w * (0.6 if label == "baseline" else 0.05), 3) for w in wall]
    # Variants drift a little from the baseline's loss, as reordered float sums do.
    drift = 0.0 if label == "baseline" else 0.01 * (len(label) % 5 + 1)
    loss = [round(loss0 * math.exp(-i / 18) + 0.05 * math.cos(i) + drift, 4) for i in index]
    return {"index": index, "wall_ms": wall, "loss": loss, "data_wait_ms": wait, "phase": phase}


def _samples(n: int, util: float) -> dict[str, list[Any]]:
    t = [round(0.1 * i, 2) for i in range(n)]
    cpu = [round(min(1.0, util + 0.08 * math.sin(i / 3)), 4) for i in range(n)]  # fraction
    rss = [int(410_000_000 + 1_500_000 * i + 4_000_000 * math.sin(i / 5)) for i in range(n)]
    return {"t": t, "cpu_util": cpu, "rss_bytes": rss}


def cpu_series(steps: int = 28, samples: int = 40) -> dict[str, Any]:
    return {
        "steps": {
            "baseline": _steps("baseline", steps, 41.0, 2.3),
            "dataloader-workers": _steps("dataloader-workers", steps, 17.0, 2.3),
            "set-num-threads": _steps("set-num-threads", steps, 40.5, 2.3),
        },
        "breakdown_ms": {
            "baseline": {
                "data": 25.1,
                "forward": 6.2,
                "backward": 7.9,
                "optimizer": 1.1,
                "other": 0.7,
            },
            "dataloader-workers": {
                "data": 1.0,
                "forward": 6.3,
                "backward": 8.0,
                "optimizer": 1.1,
                "other": 0.6,
            },
            "set-num-threads": {
                "data": 24.8,
                "forward": 6.1,
                "backward": 7.8,
                "optimizer": 1.1,
                "other": 0.7,
            },
        },
        "samples": {
            "baseline": _samples(samples, 0.55),
            "dataloader-workers": _samples(samples, 0.92),
        },
    }


def cpu_report(**overrides: Any) -> Report:
    loader_loc = SourceLocation("sample_models/image_cnn.py", 48, "main", share=0.62)
    eval_loc = SourceLocation("sample_models/image_cnn.py", 71, "evaluate", count=5)
    findings = (
        Finding(
            rule_id="input-bound-dataloader",
            severity="critical",
            title="Training waits for the DataLoader",
            explanation=(
                "62% of each step is spent waiting for the next batch: the DataLoader "
                "prepares samples in the training process (num_workers=0)."
            ),
            evidence=(
                Evidence("data_wait_frac", 0.62, 0.1, ">", "frac"),
                Evidence("dataloader_num_workers", 0, note="set in the script"),
            ),
            locations=(loader_loc,),
            optimizations=("dataloader-workers",),
            gain=GainEstimate(step_time_frac=0.55, method="data wait share minus overlap"),
        ),
        Finding(
            rule_id="cpu-threads-below-cores",
            severity="warning",
            title="Intra-op threads below the cores available",
            explanation="torch uses 1 thread while 2 logical cores are available.",
            evidence=(Evidence("torch_num_threads", 1, 2, "<"),),
            optimizations=("set-num-threads",),
            gain=GainEstimate(step_time_frac=0.1, method="thread scaling bound"),
        ),
        Finding(
            rule_id="eval-without-no-grad",
            severity="info",
            title="Evaluation builds autograd graphs",
            explanation="5 forward passes built a graph that no backward used.",
            evidence=(Evidence("grad_forwards_without_backward", 5, 0, ">"),),
            locations=(eval_loc,),
        ),
    )
    recommendations = (
        Recommendation(
            optimization_id="dataloader-workers",
            title="Load batches in worker processes",
            kind="runtime",
            risk="low: per-worker RNG streams change augmentation order",
            code_change="DataLoader(dataset, batch_size=32, num_workers=2)",
            addresses=("input-bound-dataloader",),
            expected_gain=GainEstimate(step_time_frac=0.55, method="data wait share"),
            locations=(loader_loc,),
        ),
        Recommendation(
            optimization_id="set-num-threads",
            title="Use every core for intra-op parallelism",
            kind="runtime",
            risk="low",
            code_change="torch.set_num_threads(2)",
            addresses=("cpu-threads-below-cores",),
            conflicts=("competes with DataLoader workers for the same cores",),
        ),
        Recommendation(
            optimization_id="eval-no-grad",
            title="Wrap evaluation in torch.inference_mode()",
            kind="manual",
            risk="none",
            code_change="with torch.inference_mode():\n    logits = model(x)",
            addresses=("eval-without-no-grad",),
            locations=(eval_loc,),
        ),
    )
    variants = (
        VariantResult(
            label="dataloader-workers",
            optimizations=("dataloader-workers",),
            step_ms_p50=17.2,
            step_ms_p90=18.9,
            # The paired medians' ratio, as optimize/estimate.py makes it.
            speedup=41.8 / 17.2,
            speedup_noise=0.06,
            peak_memory_bytes=612_368_384,
            loss_delta=0.0031,
            verdict="accepted",
            reason="faster: 2.43x ± 0.06",
            throughput_samples_s=1860.5,
            applied=(AppliedOptimization("dataloader-workers", True, True, "num_workers 0 -> 2"),),
            run_dirs=("dataloader-workers", "dataloader-workers/repeat-2"),
            baseline_step_ms_p50=41.8,
            pooled="median of 40 steps over 2 runs; baseline median of 40 steps over 2 runs",
            pooled_step_ms_p50=17.4,
            paired_runs=2,
            loss_tolerance=LossTolerance(
                value=1e-1,
                category="data-order",
                category_value=1e-1,
                spread_factor=2.0,
                baseline_spread=2.5e-4,
                baseline_runs=2,
            ),
        ),
        VariantResult(
            label="set-num-threads",
            optimizations=("set-num-threads",),
            step_ms_p50=40.9,
            step_ms_p90=44.0,
            speedup=41.3 / 40.9,
            speedup_noise=0.04,
            peak_memory_bytes=430_112_768,
            loss_delta=0.0,
            verdict="rejected",
            reason="not faster beyond noise (1.01x ± 0.04)",
            throughput_samples_s=782.0,
            applied=(AppliedOptimization("set-num-threads", True, True, "threads 1 -> 2"),),
            run_dirs=("set-num-threads",),
            baseline_step_ms_p50=41.3,
            paired_runs=1,
        ),
    )
    report = Report(
        schema_version=1,
        script="sample_models/image_cnn.py",
        argv=("--epochs", "2"),
        exit_code=0,
        status="completed",
        device=DeviceInfo(
            kind="cpu", name="x86_64 CPU", count=1, cpu_cores_logical=2, cpu_cores_physical=1
        ),
        versions={"python": "3.11.7", "torch": "2.13.0+cpu", "perfdoctor": "0.1.0"},
        baseline=BaselineSummary(
            steps_timed=20,
            optimizer_steps=28,
            micro_batches_per_step=1.0,
            step_ms_p50=41.5,
            step_ms_p90=45.2,
            data_wait_frac=0.62,
            step_detection="optimizer",
            throughput_samples_s=771.1,
            breakdown_ms={
                "data": 25.1,
                "forward": 6.2,
                "backward": 7.9,
                "optimizer": 1.1,
                "other": 0.7,
            },
            peak_memory_bytes=428_015_616,
            pooled_step_ms_p50=41.8,
            pooled_step_ms_p90=45.6,
            pooled="median of 40 steps over 2 runs",
        ),
        findings=findings,
        skipped_rules=(
            SkippedRule("gpu-idle-host-bound", "needs gpu_busy_frac: not measured on CPU"),
            SkippedRule("no-mixed-precision", "needs device_is_cuda: CPU run"),
            SkippedRule("pageable-h2d-copies", "needs pageable_htod_frac: not measured on CPU"),
        ),
        recommendations=recommendations,
        variants=variants,
        run_dir="perfdoctor-runs/20260101-120000-image_cnn",
        artifacts={"baseline trace": "baseline/host_1234.1700000000000.pt.trace.json.gz"},
        warnings=("DataLoader created 2 worker processes in the dataloader-workers variant",),
        facts={"step_ms_p50": 41.5, "data_wait_frac": 0.62, "torch_num_threads": 1},
        created_at="2026-01-01T12:00:00+00:00",
        series=cpu_series(),
    )
    return replace(report, **overrides)


def hostile_report() -> Report:
    """Every text field that can come from a trace, a script or a path holds HOSTILE."""
    base = cpu_report()
    loc = SourceLocation(f"{HOSTILE}.py", 3, HOSTILE, share=0.5)
    finding = Finding(
        rule_id=HOSTILE,
        severity="critical",
        title=HOSTILE,
        explanation=f"{HOSTILE}\nsecond line | with pipe",
        evidence=(Evidence(HOSTILE, HOSTILE, HOSTILE, ">", HOSTILE, HOSTILE),),
        locations=(loc,),
        optimizations=(HOSTILE,),
        gain=GainEstimate(step_time_frac=0.3, method=HOSTILE),
    )
    rec = Recommendation(
        optimization_id=HOSTILE,
        title=HOSTILE,
        kind="runtime",
        risk=HOSTILE,
        code_change=f"{HOSTILE}\n```\n</pre>{HOSTILE}",
        addresses=(HOSTILE,),
        locations=(loc,),
        conflicts=(HOSTILE,),
    )
    variant = replace(
        base.variants[0],
        label=HOSTILE,
        optimizations=(HOSTILE,),
        reason=HOSTILE,
        applied=(AppliedOptimization(HOSTILE, True, False, HOSTILE),),
    )
    series = cpu_series()
    series["steps"] = {
        "baseline": series["steps"]["baseline"],
        HOSTILE: series["steps"]["baseline"],
    }
    series["breakdown_ms"] = {HOSTILE: {HOSTILE: 3.0, "data": 1.0}}
    series["samples"] = {
        "baseline": series["samples"]["baseline"],
        HOSTILE: series["samples"]["dataloader-workers"],
    }
    return replace(
        base,
        script=f"{HOSTILE}.py",
        argv=(HOSTILE, "--x=|y|"),
        device=DeviceInfo(kind="cpu", name=HOSTILE),
        versions={HOSTILE: HOSTILE},
        findings=(finding,),
        skipped_rules=(SkippedRule(HOSTILE, HOSTILE),),
        recommendations=(rec,),
        variants=(variant,),
        run_dir=f"runs/{HOSTILE}",
        artifacts={HOSTILE: HOSTILE},
        warnings=(f"{HOSTILE}\n[/] [bold]unbalanced markup",),
        facts={HOSTILE: HOSTILE},
        series=series,
    )


def long_report(steps: int = 10_000) -> Report:
    """A long run: every series holds `steps` points per variant."""
    series = cpu_series(steps=steps, samples=steps)
    return cpu_report(series=series)


def empty_series_report() -> Report:
    """A run where nothing could be charted (e.g. it crashed in the first step)."""
    return cpu_report(series={}, variants=(), status="script_crashed", exit_code=1)
